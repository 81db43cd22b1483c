#!/usr/bin/env bash
# Installs the MCP reference server @modelcontextprotocol/server-everything
# (pinned) from npm into a cache directory and prints the path of its entry
# point.
#   scripts/server-everything.sh
# Environment: PML_CACHE (default ~/.cache/pml)
#
# Test packages run in parallel and may both need it: the install holds an
# exclusive lock, and a directory left half-installed (an install that was
# killed, or one that raced before the lock) is installed again from
# scratch.
set -euo pipefail
version=2026.8.31
cache=${PML_CACHE:-$HOME/.cache/pml}
dir=$cache/server-everything-$version
entry=$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js
done_mark=$dir/.installed
if [ ! -f "$done_mark" ]; then
  command -v npm >/dev/null || { echo "server-everything: npm is not installed" >&2; exit 1; }
  mkdir -p "$cache"
  exec 9>"$dir.lock"
  flock 9
  if [ ! -f "$done_mark" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    (cd "$dir" && npm init -y >/dev/null &&
      npm install --no-audit --no-fund --loglevel=error "@modelcontextprotocol/server-everything@$version" >&2) ||
      { echo "server-everything: npm install @modelcontextprotocol/server-everything@$version failed" >&2; exit 1; }
    [ -f "$entry" ] && touch "$done_mark"
  fi
  flock -u 9
fi
[ -f "$entry" ] || { echo "server-everything: $entry missing after install" >&2; exit 1; }
echo "$entry"
