// Package catalog holds the tool definitions an execution can see: the
// shared Tool type, filters that narrow a tool set, name checks, lexical
// search and nearest-name suggestions. How tools look from a script (the
// TypeScript declarations, call expressions) is internal/tsdecl's.
package catalog

import (
	"encoding/json"

	"github.com/pml-sandbox/pml/internal/compensate"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Annotations are the MCP tool hints that change what the host allows.
// Nil means the server did not say.
type Annotations struct {
	ReadOnly    *bool `json:"readOnlyHint,omitempty"`
	Destructive *bool `json:"destructiveHint,omitempty"`
	Idempotent  *bool `json:"idempotentHint,omitempty"`
	OpenWorld   *bool `json:"openWorldHint,omitempty"`
}

// Tool is one callable tool: an MCP server's tool or a capability.
type Tool struct {
	Server       string          `json:"server"`
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Annotations  Annotations     `json:"annotations,omitzero"`
	Kind         trace.Kind      `json:"kind"`
	// RequireApproval is set on a tool its server's configuration lists in
	// require_approval: like a destructive one, it runs only when the
	// request allows it or a person approves the call.
	RequireApproval bool `json:"require_approval,omitempty"`
	// SourceKind is the kind of source that serves the tool ("mcp",
	// "openapi", "lambda"), set by the tool source; empty elsewhere
	// (Kind then says: a capability, a built-in). The policy set reads it
	// (resource.kind); it never leaves the process.
	SourceKind string `json:"-"`
	// IdempotencyKeys is set on a tool whose server's configuration says
	// it honours idempotency keys (idempotency_keys: true): a call sent
	// again with the same key is applied once.
	IdempotencyKeys bool `json:"idempotency_keys,omitempty"`
	// Compensate is the call that undoes a call of the tool, as its
	// server's configuration declares it (compensate): a tool of the same
	// server that the server exposes, checked when its tools are listed.
	// Nil: a rollback skips its effects. Not listed to callers: it is the
	// deployment's, read by a rollback.
	Compensate *compensate.Template `json:"-"`
	// Endpoint says what a call reaches, where the tool's kind knows it:
	// shown to whoever decides a call (and in the declarations), so that
	// "delete" reads as the request it makes. Nil for MCP tools and
	// capabilities.
	Endpoint *Endpoint `json:"endpoint,omitempty"`
}

// Endpoint is what a call of a tool reaches: an HTTP operation (Method,
// the Path template and Host it is sent to), or a Lambda function.
type Endpoint struct {
	Method   string `json:"method,omitempty"`
	Path     string `json:"path,omitempty"`
	Host     string `json:"host,omitempty"`
	Function string `json:"function,omitempty"`
}

// String is the endpoint in a line: "DELETE /pets/{petId} on
// api.example.com", "Lambda function orders-cancel".
func (e *Endpoint) String() string {
	switch {
	case e == nil:
		return ""
	case e.Function != "":
		return "Lambda function " + e.Function
	case e.Host != "":
		return e.Method + " " + e.Path + " on " + e.Host
	}
	return e.Method + " " + e.Path
}

// FullName is "server:name".
func (t Tool) FullName() string { return t.Server + ":" + t.Name }

// IsDestructive reports whether the tool may change the outside world
// irreversibly, by MCP's defaults: readOnlyHint is false unless said, and
// destructiveHint, which counts only when readOnlyHint is false, is true
// unless said. So a tool that says nothing about itself is destructive. A
// deployment that knows a server under-annotates says so in the server's
// configuration (assume_not_destructive: internal/toolsource/mcp's
// Config.AssumeNotDestructive), which fills in the hints it leaves out. A capability is never destructive itself: it
// is a program whose every call is checked in its own run.
func (t Tool) IsDestructive() bool {
	if t.Kind == trace.KindCapability {
		return false
	}
	a := t.Annotations
	if a.ReadOnly != nil && *a.ReadOnly {
		return false
	}
	return a.Destructive == nil || *a.Destructive
}

// DestructiveByDefault reports whether the tool is destructive only
// because it does not say otherwise: what a refusal should tell, with the
// remedy (annotate the tool, or the server's assume_not_destructive).
func (t Tool) DestructiveByDefault() bool {
	return t.IsDestructive() && t.Annotations.Destructive == nil
}

// NeedsApproval reports whether a call to the tool needs someone's consent:
// the request's allow_destructive, or a person's decision on the parked
// call. Destructive tools do, and those their server requires approval for.
func (t Tool) NeedsApproval() bool { return t.IsDestructive() || t.RequireApproval }

// IsEffect reports whether a call to the tool is an effect, journalled
// before it is sent (internal/journal): every call of a tool that does not
// say it is read-only, by MCP's defaults (readOnlyHint is false unless
// said), whatever protocol reaches it (an OpenAPI operation's method, a
// Lambda function's read_only). A capability is no effect itself: its run
// journals its own.
func (t Tool) IsEffect() bool {
	if t.Kind == trace.KindCapability {
		return false
	}
	return t.Annotations.ReadOnly == nil || !*t.Annotations.ReadOnly
}

// HonoursKeys reports whether a call of the tool sent again with the same
// idempotency key is applied once: its server's configuration says so, or
// the tool says it is idempotent (idempotentHint: calling it again with the
// same arguments has no further effect).
func (t Tool) HonoursKeys() bool {
	return t.IdempotencyKeys || (t.Annotations.Idempotent != nil && *t.Annotations.Idempotent)
}
