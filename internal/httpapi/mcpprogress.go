package httpapi

import (
	"context"
	"fmt"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/execution"
)

// mcpProgress reports one execute_code call's progress to its client on
// the call's own response stream: each tool call's start and end as
// notifications/progress (when the client sent a progress token), and
// each console line as notifications/message.
//
// Console lines go out when the request asked for log messages: under
// protocol 2026-07-28 by its per-request log level (the library enforces
// it); before, by sending a progress token, since the endpoint is
// stateless and a logging/setLevel would set one level for every client.
type mcpProgress struct {
	ctx    context.Context
	srv    *server.MCPServer
	token  mcp.ProgressToken
	modern bool

	// mu keeps notifications in order, so progress only ever increases.
	mu             sync.Mutex
	sent           int
	started, ended int
}

func newMCPProgress(ctx context.Context, r mcp.CallToolRequest) *mcpProgress {
	p := &mcpProgress{ctx: ctx, srv: server.ServerFromContext(ctx), modern: server.IsModernRequest(ctx)}
	if r.Params.Meta != nil {
		p.token = r.Params.Meta.ProgressToken
	}
	return p
}

// event implements execution.Request.OnEvent. Sending never blocks: a client
// that does not read fast enough loses notifications, never the result.
func (p *mcpProgress) event(e execution.Event) {
	if p.srv == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Type {
	case execution.EventLog:
		level := logLevels[e.Log.Level]
		if level == "" {
			level = mcp.LoggingLevelInfo
		}
		if p.modern {
			_ = p.srv.SendLogMessageToClient(p.ctx, mcp.NewLoggingMessageNotification(level, "console", e.Log.Message))
		} else if p.token != nil {
			_ = p.srv.SendNotificationToClient(p.ctx, string(mcp.MethodNotificationMessage),
				map[string]any{"level": level, "logger": "console", "data": e.Log.Message})
		}
		return
	case execution.EventCallStart:
		p.started++
	case execution.EventCallEnd:
		p.ended++
	}
	if p.token == nil {
		return
	}
	p.sent++
	verb := "started"
	if e.Type == execution.EventCallEnd {
		verb = "ended"
		if !e.Call.OK {
			verb = "failed (" + string(e.Call.ErrorCode) + ")"
		}
	}
	msg := fmt.Sprintf("%s:%s %s; %d calls done, %d in flight", e.Call.Server, e.Call.Tool, verb, p.ended, max(p.started-p.ended, 0))
	_ = p.srv.SendNotificationToClient(p.ctx, string(mcp.MethodNotificationProgress),
		map[string]any{"progressToken": p.token, "progress": p.sent, "message": msg})
}

// logLevels maps console methods to MCP (syslog) levels.
var logLevels = map[string]mcp.LoggingLevel{
	"log":   mcp.LoggingLevelInfo,
	"info":  mcp.LoggingLevelInfo,
	"warn":  mcp.LoggingLevelWarning,
	"error": mcp.LoggingLevelError,
}
