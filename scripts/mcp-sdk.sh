#!/usr/bin/env bash
# Installs the official MCP TypeScript SDK (pinned with its dependencies in
# integration/testdata/tsclient/package-lock.json) into a cache directory
# and prints the path of its node_modules. integration/elicit_test.go runs
# a client on it.
#   scripts/mcp-sdk.sh
# Environment: PML_CACHE (default ~/.cache/pml)
#
# npm ci checks every package against the lockfile's integrity. Concurrent
# callers serialise on a lock file; an install is moved into place whole.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/integration/testdata/tsclient
cache=${PML_CACHE:-$HOME/.cache/pml}
sum=$(sha256sum "$src/package-lock.json" | cut -c1-16)
dir=$cache/mcp-sdk-$sum
fail() { echo "mcp-sdk: $*" >&2; exit 1; }

mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [ ! -d "$dir/node_modules/@modelcontextprotocol/sdk" ]; then
  command -v npm >/dev/null || fail "npm is not installed"
  tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  cp "$src/package.json" "$src/package-lock.json" "$tmp/"
  (cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error >&2) || fail "npm ci of the MCP SDK failed"
  rm -rf "$dir"
  mv -T "$tmp" "$dir"
fi
[ -d "$dir/node_modules/@modelcontextprotocol/sdk" ] || fail "$dir/node_modules/@modelcontextprotocol/sdk missing after install"
echo "$dir/node_modules"
