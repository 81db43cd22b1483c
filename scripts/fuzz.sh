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
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# deadline_race: the run in LOG failed only as Go 1.26's fuzz coordinator
# can at the end of a -fuzztime run on a busy machine, a bare "context
# deadline exceeded" with no input written and no failure of the target's
# own (golang/go#75804, fixed in Go 1.27). Anything else is a finding.
deadline_race() {
  grep -q '^    context deadline exceeded$' "$1" &&
    ! grep -qE 'Failing input written|panic:|\.go:[0-9]+:|fuzz: minimizing' "$1"
}
# Fuzz functions are found in the test sources (`go test -list` would build
# every package's tests just to list them).
while read -r file target; do
  pkg=./$(dirname "$file")
  found=$((found + 1))
  echo "fuzz: $pkg $target ($fuzztime)"
  if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"; then
    continue
  fi
  deadline_race "$log" || exit 1
  echo "fuzz: $target ended in Go's -fuzztime race (golang/go#75804), nothing found; replaying its corpus"
  go test -count=1 -run "^${target}\$" "$pkg"
done < <(git ls-files '*_test.go' 2>/dev/null | xargs grep -H -o '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func / /')
[ "$found" -gt 0 ] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
echo "fuzz: $found targets passed"
