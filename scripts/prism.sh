#!/usr/bin/env bash
# Installs the OpenAPI sources' test fixtures, pinned with their
# dependencies in integration/testdata/prism/package-lock.json, into a cache
# directory, and prints that directory: Stoplight's Prism mock server
# (@stoplight/prism-cli), which serves an API from its OpenAPI document, and
# ReadMe's collection of published OpenAPI documents (@readme/oas-examples),
# the Swagger Petstore among them. Prism runs on Node 22 from
# scripts/node22.sh; the directory's bin/node links to it.
#   scripts/prism.sh
# Environment: PML_CACHE (default ~/.cache/pml)
#
# Installed once per lockfile (`npm ci`, whose integrity checks npm makes);
# concurrent callers serialise on a lock file, and a directory left
# half-installed is installed again from scratch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${PML_CACHE:-$HOME/.cache/pml}
lock=$root/integration/testdata/prism/package-lock.json
sum=$(sha256sum "$lock" | cut -c1-16)
dir=$cache/prism-$sum
done_mark=$dir/.installed

fail() { echo "prism: $*" >&2; exit 1; }

node=$("$root/scripts/node22.sh")
if [ ! -f "$done_mark" ]; then
  mkdir -p "$cache"
  exec 9>"$dir.lock"
  flock 9
  if [ ! -f "$done_mark" ]; then
    command -v npm >/dev/null || fail "npm is not installed (needed once to fetch the fixtures)"
    rm -rf "$dir"
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    cp "$root/integration/testdata/prism/package.json" "$lock" "$tmp/"
    (cd "$tmp" && PATH="$(dirname "$node"):$PATH" npm ci --no-audit --no-fund --loglevel=error >&2) ||
      { rm -rf "$tmp"; fail "npm ci of the fixtures failed"; }
    mkdir -p "$tmp/bin"
    ln -s "$node" "$tmp/bin/node"
    mv -T "$tmp" "$dir"
    touch "$done_mark"
  fi
  flock -u 9
fi
[ -f "$dir/node_modules/@stoplight/prism-cli/dist/index.js" ] || fail "prism missing after install in $dir"
echo "$dir"
