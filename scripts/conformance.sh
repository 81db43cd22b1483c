#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance,
# pinned with its dependencies in conformance/package-lock.json, on Node 22
# from scripts/node22.sh) against pml, both ways:
#   - client scenarios, with pml as the client (conformance/client.sh), judged
#     against conformance/client-baseline.yml;
#   - server scenarios, against the /mcp endpoint of a `pml serve` this script
#     starts on a free loopback port, judged against
#     conformance/server-baseline.yml.
# Each leg fails on any scenario that fails outside its baseline, and on any
# baseline entry that now passes (the suite's --expected-failures rules).
#   scripts/conformance.sh [client|server]...   (default: both)
# Environment: PML (the pml binary, default bin/pml), PML_CACHE (default
# ~/.cache/pml), CONFORMANCE_OUT (where the suite's results go; default a
# temporary directory).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pml=${PML:-$root/bin/pml}
export PML="$pml"
legs=("$@")
[ ${#legs[@]} -gt 0 ] || legs=(client server)

fail() { echo "conformance: $*" >&2; exit 1; }
[ -x "$pml" ] || fail "$pml is not built (make pml)"

node=$(scripts/node22.sh)
export PATH="$(dirname "$node"):$PATH"

# The suite, installed once per lockfile into the cache.
suite=$(scripts/conformance-suite.sh)

out=${CONFORMANCE_OUT:-$(mktemp -d)}
mkdir -p "$out"
cd "$out"
# Traces, capabilities and credentials of these runs stay with the results,
# out of the user's data directory.
export XDG_DATA_HOME="$out/data"
# conformance/client.sh bounds how many pml processes run at once with slot
# files here (PML_CONFORMANCE_JOBS, default twice the CPUs).
export PML_CONFORMANCE_SLOTS="$out/slots"
unset PML_TRACES_FILE PML_CAPABILITIES_FILE PML_SUSPENSIONS_DIR PML_MCP_CREDENTIALS_DIR PML_MCP_SERVERS

# Every client scenario starts a pml process (a few at a time, see
# conformance/client.sh): compile the guest into the cache first so that
# none of them has to.
"$pml" run -e 'return 1' >/dev/null

status=0
for leg in "${legs[@]}"; do
  start=$(date +%s)
  case $leg in
    client)
      echo "conformance: client scenarios, pml as the client"
      "$node" "$suite" client --command "$root/conformance/client.sh" --suite all --timeout 120000 \
        --expected-failures "$root/conformance/client-baseline.yml" -o "$out/client" || status=1
      ;;
    server)
      port=$("$node" -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
      "$pml" serve --addr "127.0.0.1:$port" >"$out/serve.log" 2>&1 &
      serve_pid=$!
      trap 'kill $serve_pid 2>/dev/null || true' EXIT
      for _ in $(seq 1 300); do
        curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        kill -0 $serve_pid 2>/dev/null || { cat "$out/serve.log" >&2; fail "pml serve exited"; }
        sleep 0.1
      done
      echo "conformance: server scenarios against pml serve at http://127.0.0.1:$port/mcp"
      "$node" "$suite" server --url "http://127.0.0.1:$port/mcp" --suite all \
        --expected-failures "$root/conformance/server-baseline.yml" -o "$out/server" || status=1
      kill $serve_pid 2>/dev/null || true
      wait $serve_pid 2>/dev/null || true
      trap - EXIT
      ;;
    *) fail "unknown leg $leg (want client or server)" ;;
  esac
  echo "conformance: $leg scenarios took $(($(date +%s) - start)) s"
done
[ $status -eq 0 ] || echo "conformance: FAILED (results in $out)" >&2
exit $status
