#!/usr/bin/env bash
# The MCP conformance suite's client under test: pml. The suite runs
#   conformance/client.sh SERVER_URL
# with MCP_CONFORMANCE_SCENARIO naming the scenario and, for some,
# MCP_CONFORMANCE_CONTEXT holding its data (client credentials, a key).
# This script writes the server configuration a user would write for that
# server and runs pml on it: `pml run` calls the scenario's tool (with
# --login headless, since the suite's authorization server redirects at
# once, for servers that ask for a login or more scopes mid-run), and
# `pml tools` lists the tools where the scenario only checks the handshake.
# Environment: PML (the pml binary, default bin/pml beside this script).
set -euo pipefail
url=${1:?usage: client.sh SERVER_URL}
here=$(cd "$(dirname "$0")" && pwd)
pml=${PML:-$here/../bin/pml}
scenario=${MCP_CONFORMANCE_SCENARIO:-}
# The suite starts every scenario at once (48 of them, each running this
# script and a pml process that must connect within the pool's 10 s
# budget, all served by the suite's one Node process): on a 2-core machine
# they starve one another and the suite. So before anything else each
# scenario takes one of a few slots (PML_CONFORMANCE_JOBS, default twice the
# CPUs), held until this script exits; every scenario still runs and is
# judged, a few at a time. The waiters queue on one lock, so only one of
# them polls for a free slot. The suite's own timeout (120 s a scenario)
# covers the wait.
slots=${PML_CONFORMANCE_SLOTS:-${TMPDIR:-/tmp}/pml-conformance-slots}
jobs=${PML_CONFORMANCE_JOBS:-$((2 * $(nproc 2>/dev/null || echo 2)))}
mkdir -p "$slots"
take_slot() {
  local i
  for i in $(seq 1 "$jobs"); do
    exec 8>>"$slots/$i"
    if flock -n 8; then return 0; fi
    exec 8>&-
  done
  return 1
}
exec 9>>"$slots/queue"
flock 9
until take_slot; do sleep 0.1; done
exec 9>&-
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each scenario's credentials in a directory of its own.
export PML_MCP_CREDENTIALS_DIR=$work/credentials PML_LOG_LEVEL=${PML_LOG_LEVEL:-warn}
unset PML_MCP_SERVERS

ctx() { node -e 'const c = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}"); process.stdout.write(String(c[process.argv[1]] ?? ""))' "$1"; }
q() { node -e 'process.stdout.write(JSON.stringify(process.argv[1]))' "$1"; }

auth='{}'
case $scenario in
  auth/client-credentials-basic)
    auth="{\"type\": \"client_credentials\", \"client_id\": $(q "$(ctx client_id)"), \"client_secret\": $(q "$(ctx client_secret)")}" ;;
  auth/client-credentials-jwt)
    # The key goes in a file, referenced as a user would keep it.
    ctx private_key_pem >"$work/key.pem"
    auth="{\"type\": \"client_credentials\", \"client_id\": $(q "$(ctx client_id)"), \"private_key\": \"\${file:$work/key.pem}\", \"signing_alg\": $(q "$(ctx signing_algorithm)")}" ;;
  auth/pre-registration)
    auth="{\"type\": \"oauth\", \"client_id\": $(q "$(ctx client_id)"), \"client_secret\": $(q "$(ctx client_secret)")}" ;;
  auth/*)
    # The suite's fixed client ID metadata document URL.
    auth='{"client_metadata_url": "https://conformance-test.local/client-metadata.json"}' ;;
esac
# The suite's tools say nothing about themselves, which MCP's defaults make
# destructive: a user of such a server says it under-annotates.
# connect_timeout: the suite serves every scenario from one Node process,
# which starts 48 servers at once; on a loaded 2-core machine its event loop
# took more than the pool's 10 s default to accept a scenario's first
# connection (the slots above bound pml, not the suite). What is tested is
# the protocol, so the scenarios' servers get 30 s.
cat >"$work/servers.json" <<JSON
{"servers": [{"name": "s", "url": $(q "$url"), "transport": "streamable", "connect_timeout": "30s", "allow_destructive": true, "assume_not_destructive": true, "auth": $auth}]}
JSON


run() { "$pml" run --config "$work/servers.json" --demo off --login headless -e "$1"; }
case $scenario in
  tools_call) run 'return await mcp.s.add_numbers({a: 2, b: 3})' ;;
  sse-retry) run 'return await mcp.s.test_reconnection({})' ;;
  http-custom-headers)
    # The suite's own example arguments: each x-mcp-header parameter must go
    # out as its Mcp-Param-* header, Base64-wrapped where it is not plain
    # ASCII; a parameter left out sends no header.
    run 'return [
      await mcp.s.test_custom_headers({region: "us-west1", priority: 42, verbose: false, debug: true, empty_val: "",
        method_val: "test-method", float_val: 3.14159, non_ascii_val: "Hello, 世界", whitespace_val: " padded ",
        leading_space_val: " us-west1", trailing_space_val: "us-west1 ", internal_space_val: "us west 1",
        control_char_val: "line1\nline2", crlf_val: "line1\r\nline2", tab_val: "\tindented", query: "SELECT * FROM users"}),
      await mcp.s.test_custom_headers_null({region: "us-east1", priority: 1, query: "SELECT 1"})]' ;;
  sep-2322-client-request-state)
    # The server asks before it answers (input_required): pml parks the
    # call and the execution suspends (exit 3) until a person answers with
    # pml resume, here one who accepts every question, filling its form
    # (true, a string's first choice or "yes", 1); each answer resumes it
    # in a new pml process, which sends the call again with the server's
    # requestState. The unrelated call runs while the first one is parked.
    set +e
    "$pml" run --config "$work/servers.json" --demo off --approval suspend -e 'const [a, u] = await Promise.all([
        mcp.s.test_mrtr_echo_state({}), mcp.s.test_mrtr_unrelated({})]);
      return [a, u, await mcp.s.test_mrtr_no_state({}), await mcp.s.test_mrtr_no_result_type({})]' >"$work/doc.json"
    status=$?
    while [ $status -eq 3 ]; do
      set -- $(node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        const fill = s => Object.fromEntries(Object.entries((s && s.properties) || {}).map(([k, p]) =>
          [k, p.type === "boolean" ? true : p.type === "string" ? (p.enum ? p.enum[0] : "yes") : 1]));
        const args = [d.execution_id];
        for (const p of d.pending) {
          const answers = Object.fromEntries(Object.entries(p.questions || {}).map(([k, q]) =>
            [k, {action: "accept", content: fill(q.requestedSchema)}]));
          args.push("--answer", p.call_id + "=" + JSON.stringify(answers));
        }
        process.stdout.write(args.join(" "));' "$work/doc.json")
      "$pml" resume --config "$work/servers.json" --demo off "$@" >"$work/doc.json"
      status=$?
    done
    cat "$work/doc.json"
    exit $status ;;
  elicitation-sep1034-client-defaults)
    # The server asks while the call is in flight (elicitation/create on
    # its 2025-11-25 session) and holds the call open until it is answered.
    # pml run answers in line: here a person who accepts the form as it
    # comes, every field at its default ("accept": pml fills in the form's
    # defaults, SEP-1034), written beforehand with --answers.
    echo '["accept"]' | "$pml" run --config "$work/servers.json" --demo off --answers - \
      -e 'return await mcp.s.test_client_elicitation_defaults({})' ;;
  http-invalid-tool-headers)
    # The tools with broken header bindings are left out of the catalog;
    # the valid one stays callable.
    run 'return await mcp.s.valid_tool({region: "us-east1"})' ;;
  json-schema-2020-12-preservation)
    # Echo a tool's input schema as pml lists it: what a script (or an
    # agent reading `pml tools`) sees must be the server's schema, intact.
    schema=$("$pml" tools --config "$work/servers.json" --demo off |
      node -e 'let d = ""; process.stdin.on("data", c => d += c).on("end", () => {
        const t = JSON.parse(d).tools.find(t => t.name === "json_schema_2020_12_tool");
        process.stdout.write(JSON.stringify(t.input_schema ?? t.inputSchema)); })')
    run "return await mcp.s.json_schema_echo({schema: $schema})" ;;
  auth/client-credentials-*) "$pml" tools --config "$work/servers.json" --demo off ;;
  auth/*) run 'return await mcp.s["test-tool"]({})' ;;
  *) "$pml" tools --config "$work/servers.json" --demo off ;;
esac
