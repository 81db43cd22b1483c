#!/usr/bin/env bash
# Installs the official MCP conformance suite (@modelcontextprotocol/conformance,
# pinned with its dependencies in conformance/package-lock.json) into a
# cache directory, once per lockfile, and prints the path of its entry
# point. scripts/conformance.sh runs the suite; internal/js/script's corpus
# test reads the JavaScript of its node_modules.
#   scripts/conformance-suite.sh
# Environment: PML_CACHE (default ~/.cache/pml)
#
# npm ci checks every package against the lockfile's integrity. Concurrent
# callers serialise on a lock file; an install is moved into place whole.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${PML_CACHE:-$HOME/.cache/pml}
fail() { echo "conformance-suite: $*" >&2; exit 1; }

# npm runs the packages' install scripts with the node on PATH: Node 22.
node=$(scripts/node22.sh)
export PATH="$(dirname "$node"):$PATH"

lock_sum=$(sha256sum conformance/package-lock.json | cut -c1-16)
suite_dir=$cache/conformance-$lock_sum
suite=$suite_dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
mkdir -p "$cache"
(
  flock 9
  if [ ! -f "$suite" ]; then
    command -v npm >/dev/null || fail "npm is not installed (needed once to fetch the suite)"
    tmp=$(mktemp -d "$suite_dir.tmp.XXXXXX")
    cp conformance/package.json conformance/package-lock.json "$tmp/"
    (cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error >&2) || { rm -rf "$tmp"; fail "npm ci of the conformance suite failed"; }
    rm -rf "$suite_dir"
    mv -T "$tmp" "$suite_dir"
  fi
) 9>"$suite_dir.lock"
[ -f "$suite" ] || fail "$suite missing after install"
echo "$suite"
