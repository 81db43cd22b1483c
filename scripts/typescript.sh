#!/usr/bin/env bash
# Installs the TypeScript compiler (pinned) from npm into a cache directory
# and prints the path of its tsc. The declaration tests type-check with it.
#   scripts/typescript.sh
# Environment: PML_CACHE (default ~/.cache/pml)
set -euo pipefail
version=5.9.3
dir=${PML_CACHE:-$HOME/.cache/pml}/typescript-$version
tsc=$dir/node_modules/typescript/bin/tsc
if [ ! -f "$tsc" ]; then
  command -v npm >/dev/null || { echo "typescript: npm is not installed" >&2; exit 1; }
  # Test packages run in parallel and may both install: each installs into
  # its own directory and the first to finish moves it into place.
  mkdir -p "$(dirname "$dir")"
  tmp=$(mktemp -d "$dir.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm init -y >/dev/null &&
    npm install --no-audit --no-fund --loglevel=error "typescript@$version" >&2) ||
    { echo "typescript: npm install typescript@$version failed" >&2; exit 1; }
  mv -T "$tmp" "$dir" 2>/dev/null || true
fi
[ -f "$tsc" ] || { echo "typescript: $tsc missing after install" >&2; exit 1; }
echo "$tsc"
