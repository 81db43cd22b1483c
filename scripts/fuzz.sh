#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each, so CI keeps
# the fuzzers exercised without an open-ended run.
#
#   scripts/fuzz.sh [FUZZTIME]     (default 20s per target)
#
# Targets are found in the test sources, so a new Fuzz function is picked
# up without touching this script. A failure leaves its input under the
# package's testdata/fuzz/ for `go test` to replay.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-${FUZZTIME:-20s}}
found=0
# Fuzz functions are found in the test sources (`go test -list` would build
# every package's tests just to list them).
while read -r file target; do
  pkg=./$(dirname "$file")
  found=$((found + 1))
  echo "fuzz: $pkg $target ($fuzztime)"
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
done < <(git ls-files '*_test.go' 2>/dev/null | xargs grep -H -o '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func / /')
[ "$found" -gt 0 ] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
echo "fuzz: $found targets passed"
