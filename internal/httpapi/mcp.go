package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/tsdecl"
)

// mcpHandler is the deployment itself as an MCP server: an agent such as
// Claude Code adds this one endpoint and gets code execution over every tool
// behind it. Stateless streamable HTTP, so any Lambda instance can answer
// any request.
func (a *api) mcpHandler() http.Handler {
	s := server.NewMCPServer("pml-sandbox", "1.0.0", server.WithToolCapabilities(false),
		server.WithInstructions("Run JavaScript against this deployment's tools with execute_code: "+
			"the code is the body of an async function; call tools as `await mcp.<server>.<tool>(args)` "+
			"and `return` the result. Use search_tools first to find tools."))
	s.AddTool(mcp.NewTool("execute_code",
		mcp.WithDescription("Run a JavaScript program in a fresh sandbox. The code is the body of an async function: "+
			"`return` gives the result, `args` holds the arguments, tools are called as `await mcp.<server>.<tool>({...})` "+
			"and run concurrently under Promise.all. Returns {ok, result, logs, error, calls, execution_id, duration_ms}."),
		mcp.WithString("code", mcp.Required(), mcp.Description("the body of an async function")),
		mcp.WithObject("args", mcp.Description("JSON value bound to `args`")),
		mcp.WithArray("tools", mcp.Description(`narrow the tool set: "server:tool" patterns, where * matches any run of characters ("kv:*", "fs:read_*")`), mcp.WithStringItems()),
		mcp.WithNumber("timeout_ms", mcp.Description("deadline in milliseconds")),
		mcp.WithBoolean("allow_destructive", mcp.Description("let tools annotated destructive run")),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(true),
	), a.mcpExecute)
	s.AddTool(mcp.NewTool("search_tools",
		mcp.WithDescription("Find tools by what they do (lexical ranking over names and descriptions). Returns how to call each."),
		mcp.WithString("query", mcp.Required()),
		mcp.WithNumber("limit", mcp.Description("at most this many (default 10)")),
		mcp.WithReadOnlyHintAnnotation(true),
	), a.mcpSearch)
	s.AddTool(mcp.NewTool("list_capabilities",
		mcp.WithDescription("List the saved capabilities (programs callable as mcp.<namespace>.<action>())."),
		mcp.WithReadOnlyHintAnnotation(true),
	), a.mcpListCapabilities)
	s.AddTool(mcp.NewTool("save_capability",
		mcp.WithDescription("Save a program that worked as a capability namespace:action, callable later as mcp.<namespace>.<action>(args)."),
		mcp.WithString("name", mcp.Required(), mcp.Description("namespace:action")),
		mcp.WithString("code", mcp.Required()),
		mcp.WithString("description"),
		mcp.WithObject("input_schema", mcp.Description("JSON Schema of the arguments")),
		mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(false),
	), a.mcpSaveCapability)
	// With a Guard, the library's own DNS-rebinding check is redundant and
	// would refuse the allowed hosts (with a text error), so it is off.
	return server.NewStreamableHTTPServer(s, server.WithStateLess(true),
		server.WithDisableLocalhostProtection(a.Guard != nil))
}

func (a *api) mcpExecute(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	raw, err := json.Marshal(r.GetArguments())
	if err != nil {
		return mcp.NewToolResultError("arguments are not JSON: " + err.Error()), nil
	}
	req, ferr := DecodeExecuteRequest(raw)
	if ferr != nil {
		return mcp.NewToolResultError(ferr.Error()), nil
	}
	req.Source = "mcp"
	req.TraceHeader = TraceHeader(ctx, "")
	resp := a.Service.Execute(ctx, req)
	a.flush(ctx)
	text, _ := json.Marshal(resp)
	res := mcp.NewToolResultStructured(resp, string(text))
	res.IsError = !resp.OK
	return res, nil
}

func (a *api) mcpSearch(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	limit := int(r.GetFloat("limit", 10))
	if limit <= 0 {
		limit = 10
	}
	hits := catalog.Search(a.Service.Catalog(ctx), r.GetString("query", ""), limit)
	type hit struct {
		Call        string          `json:"call"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema,omitempty"`
		Score       float64         `json:"score"`
	}
	out := make([]hit, len(hits))
	for i, h := range hits {
		out[i] = hit{Call: tsdecl.CallExpr(h.Tool), Description: h.Tool.Description, InputSchema: h.Tool.InputSchema, Score: h.Score}
	}
	return structured(map[string]any{"tools": out})
}

func (a *api) mcpListCapabilities(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if a.Capabilities == nil {
		return structured(map[string]any{"capabilities": []any{}})
	}
	list, err := a.Capabilities.List(ctx)
	if err != nil {
		return mcp.NewToolResultError(fault.As(err).Error()), nil
	}
	return structured(map[string]any{"capabilities": list})
}

func (a *api) mcpSaveCapability(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if a.Capabilities == nil {
		return mcp.NewToolResultError("this deployment has no capability registry"), nil
	}
	c := CapabilitySave{Name: r.GetString("name", ""), Code: r.GetString("code", ""), Description: r.GetString("description", "")}
	if s, ok := r.GetArguments()["input_schema"]; ok && s != nil {
		c.InputSchema, _ = json.Marshal(s)
	}
	saved, err := a.Capabilities.Save(ctx, c)
	if err != nil {
		return mcp.NewToolResultError(fault.As(err).Error()), nil
	}
	return structured(saved)
}

func structured(v any) (*mcp.CallToolResult, error) {
	text, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mcp.NewToolResultStructured(v, string(text)), nil
}
