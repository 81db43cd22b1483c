// Package execution is the contract of an execution: what every front end
// (the CLI, the HTTP API and its MCP endpoint, Lambda events) sends and
// receives, and what the service, its tool sources and the capability
// runner agree on. It holds data and small rules only — the request and
// its one decoder and validator, the response, the lineage of a call
// through its request tree, decisions and events, and the interfaces of a
// tool source and an executor — so that front ends and adapters import it
// and nothing of the service or the sandbox engine.
//
// Requests are decoded strictly (Decode, DecodeResume, DecodeInvocation):
// field names are exact and case-sensitive, unknown and repeated fields are
// refused, so a field that a proxy or a WAF rule does not recognise never
// reaches the service under another spelling.
package execution
