package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/execution"
)

// addRollbackTool adds rollback_execution: what POST
// /executions/{id}/rollback does, for the execution's owner (or an
// approver). Each compensating call is gated like any call: one that
// needs approval waits for a person, whatever the agent asks.
func (s *Server) addRollbackTool(ms *server.MCPServer) {
	ms.AddTool(mcp.NewTool("rollback_execution",
		mcp.WithDescription("Undo what an execution did: run the compensations the deployment declared for its applied effects "+
			"(each tool's undo, e.g. cancel_order for create_order), newest first, as an execution of its own. "+
			"Every compensation is attempted even when one fails; structuredContent says, for each effect, "+
			"compensated, failed (with its error) or skipped (not applied, no compensation declared, arguments not kept…). "+
			"A compensating call that needs approval waits for a person: the answer then names the rollback's execution "+
			"and its approval_url, and status is rolling_back. An effect compensated once is never undone twice. "+
			"dry_run says what would run, and runs nothing."),
		mcp.WithString("execution_id", mcp.Required(), mcp.Description("the execution to roll back (execution_id of execute_code's answer)")),
		mcp.WithBoolean("allow_destructive", mcp.Description("let compensating calls that need approval run without asking (where the deployment lets this caller consent)")),
		mcp.WithString("approval", mcp.Enum(execution.ApprovalRefuse, execution.ApprovalSuspend),
			mcp.Description(`a compensating call that needs approval waits for a person ("suspend", the default) or fails FORBIDDEN ("refuse")`)),
		mcp.WithBoolean("dry_run", mcp.Description("say what would run, and run nothing")),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(true),
	), s.mcpRollback)
}

func (s *Server) mcpRollback(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err := r.RequireString("execution_id")
	if err != nil || id == "" {
		return mcp.NewToolResultError("execution_id is required: the id execute_code answered"), nil
	}
	args := r.GetArguments()
	delete(args, "execution_id")
	raw, _ := json.Marshal(args)
	rr, ferr := execution.DecodeRollback(raw, id)
	if ferr != nil {
		return mcp.NewToolResultError(ferr.Error()), nil
	}
	rr.Principal = execution.PrincipalFrom(ctx)
	rr.Source = execution.SourceMCP
	rr.TraceHeader = execution.TraceHeader(ctx, "")
	rb, ferr := s.opts.Service.Rollback(ctx, rr)
	if ferr != nil {
		res := mcp.NewToolResultStructured(map[string]any{"ok": false, "error": ferr}, refusedText("rollback", id, ferr))
		res.IsError = true
		return res, nil
	}
	s.flush(ctx)
	return mcp.NewToolResultStructured(rb, rollbackText(rb)), nil
}

// rollbackText is a rollback's answer for a model: the sentence, and a
// line per effect.
func rollbackText(rb *execution.Rollback) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rollback of %s: %s\n%s\n", rb.ExecutionID, rb.Status, rb.Message)
	for i, e := range rb.Effects {
		if i == 50 {
			fmt.Fprintf(&b, "… and %d more effects (structuredContent lists them all)\n", len(rb.Effects)-i)
			break
		}
		fmt.Fprintf(&b, "#%d %s.%s (%s): %s", e.CallID, e.Server, e.Tool, e.Status, e.Outcome)
		if c := e.Compensation; c != nil {
			fmt.Fprintf(&b, " by %s.%s", c.Server, c.Tool)
		}
		switch {
		case e.Error != nil:
			fmt.Fprintf(&b, ": %s %s", e.Error.Code, e.Error.Message)
		case e.Reason != "":
			fmt.Fprintf(&b, ": %s", e.Reason)
		}
		b.WriteString("\n")
	}
	if x := rb.Execution; x != nil && x.Suspended() {
		fmt.Fprintf(&b, "The rollback (execution %s) waits for a person to approve its compensating calls", rb.RollbackID)
		if x.ApprovalURL != "" {
			fmt.Fprintf(&b, " at %s", x.ApprovalURL)
		}
		b.WriteString(": show the user, and continue with resume_execution on that execution once they decided.\n")
	}
	return b.String()
}
