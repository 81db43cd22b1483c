#!/usr/bin/env bash
# Installs GitHub's REST API description (@octokit/openapi, pinned with its
# integrity in integration/testdata/octokit/package-lock.json) into a cache
# directory and prints the path of its api.github.com.json: the large
# catalog the OpenAPI cache's tests and benchmarks configure (issue 43).
#   scripts/octokit.sh
# Environment: PML_CACHE (default ~/.cache/pml)
#
# Installed once per lockfile (`npm ci` checks the integrity); concurrent
# callers serialise on a lock file, and a half-installed directory is
# installed again from scratch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${PML_CACHE:-$HOME/.cache/pml}
lock=$root/integration/testdata/octokit/package-lock.json
sum=$(sha256sum "$lock" | cut -c1-16)
dir=$cache/octokit-$sum
done_mark=$dir/.installed
doc=$dir/node_modules/@octokit/openapi/generated/api.github.com.json

fail() { echo "octokit: $*" >&2; exit 1; }

if [ ! -f "$done_mark" ]; then
  mkdir -p "$cache"
  exec 9>"$dir.lock"
  flock 9
  if [ ! -f "$done_mark" ]; then
    command -v npm >/dev/null || fail "npm is not installed (needed once to fetch the document)"
    rm -rf "$dir"
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    cp "$root/integration/testdata/octokit/package.json" "$lock" "$tmp/"
    (cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
      { rm -rf "$tmp"; fail "npm ci of @octokit/openapi failed"; }
    mv -T "$tmp" "$dir"
    touch "$done_mark"
  fi
  flock -u 9
fi
[ -f "$doc" ] || fail "api.github.com.json missing after install in $dir"
echo "$doc"
