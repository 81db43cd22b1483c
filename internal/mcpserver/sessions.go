package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/execution"
)

// Sessions over MCP: execute_code takes session ("new") and session_id,
// and end_session deletes one. A session is the MCP client's principal's:
// over the stateless Lambda any container continues it.

// sessionUsage is what execute_code's description says of sessions.
const sessionUsage = `To keep working state between calls, start a session with session: "new" (the answer's session.id names it) ` +
	`and pass session_id in the next calls: their top-level const/let/function/class declarations and globalThis carry over ` +
	`(fetch once, then filter in the next call without fetching again); a later call may declare a name again. ` +
	`Timers and calls still running when a call returns do not carry over. A failed call leaves the session as it was. ` +
	`End it with end_session when done.`

// sessionParams are execute_code's session arguments.
func sessionParams() mcp.ToolOption {
	return func(t *mcp.Tool) {
		for _, o := range []mcp.ToolOption{
			mcp.WithString("session", mcp.Enum(execution.SessionNew), mcp.Description(`"new": start a session; the answer's session.id continues it`)),
			mcp.WithString("session_id", mcp.Description("continue this session (session.id of an earlier answer)")),
			mcp.WithNumber("session_ttl_s", mcp.Description(`with session "new": seconds the session lives without a call (default 3600, at most 86400)`)),
		} {
			o(t)
		}
	}
}

// addSessionTools registers end_session.
func (s *Server) addSessionTools(ms *server.MCPServer) {
	ms.AddTool(mcp.NewTool("end_session",
		mcp.WithDescription("End a session execute_code started: its state is deleted, and its id continues nothing any more."),
		mcp.WithString("session_id", mcp.Required(), mcp.Description("the session's id (session.id of execute_code's answer)")),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithIdempotentHintAnnotation(false),
	), s.mcpEndSession)
}

func (s *Server) mcpEndSession(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err := r.RequireString("session_id")
	if err != nil || id == "" {
		return mcp.NewToolResultError("session_id is required: the session.id execute_code answered"), nil
	}
	if ferr := s.opts.Service.EndSession(ctx, execution.SessionRequest{SessionID: id, Principal: execution.PrincipalFrom(ctx)}); ferr != nil {
		return s.refusal(id, ferr), nil
	}
	return mcp.NewToolResultStructured(map[string]any{"session_id": id, "deleted": true}, "session "+id+" ended: its state is deleted"), nil
}

// sessionText is the model's line about the session an execution ran in
// ("" outside one).
func sessionText(s *execution.ResponseSession) string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	if s.Saved {
		fmt.Fprintf(&b, "session %s: state kept (%d executions, %d bytes)", s.ID, s.Executions, s.SizeBytes)
	} else {
		fmt.Fprintf(&b, "session %s: nothing of this execution kept", s.ID)
	}
	if len(s.Names) > 0 {
		b.WriteString("; names: " + strings.Join(s.Names, ", "))
	}
	if s.Note != "" {
		b.WriteString("; " + s.Note)
	}
	return b.String() + "\n"
}
