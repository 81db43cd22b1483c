#!/usr/bin/env bash
# Installs the MCP reference server @modelcontextprotocol/server-everything
# (pinned) from npm into a cache directory and prints that directory.
#   scripts/server-everything.sh
# Environment: PML_CACHE (default ~/.cache/pml)
set -euo pipefail
version=2026.8.31
dir=${PML_CACHE:-$HOME/.cache/pml}/server-everything-$version
entry=$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js
if [ ! -f "$entry" ]; then
  command -v npm >/dev/null || { echo "server-everything: npm is not installed" >&2; exit 1; }
  mkdir -p "$dir"
  (cd "$dir" && { [ -f package.json ] || npm init -y >/dev/null; } &&
    npm install --no-audit --no-fund --loglevel=error "@modelcontextprotocol/server-everything@$version" >&2) ||
    { echo "server-everything: npm install @modelcontextprotocol/server-everything@$version failed" >&2; exit 1; }
fi
[ -f "$entry" ] || { echo "server-everything: $entry missing after install" >&2; exit 1; }
echo "$entry"
