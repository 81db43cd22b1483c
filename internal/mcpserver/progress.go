package mcpserver

import (
	"context"
	"errors"
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
	// dropped counts the notifications the library refused since the last
	// one it took: its queue for the request (100 notifications) was full
	// because the client reads too slowly.
	dropped int
}

// mcpLogNoteBytes bounds a console line sent as a notification, so that
// the library's queue of a client that stops reading (100 notifications)
// holds about a megabyte at most; the result has the whole line.
const mcpLogNoteBytes = 8 << 10

func newMCPProgress(ctx context.Context, r mcp.CallToolRequest) *mcpProgress {
	p := &mcpProgress{ctx: ctx, srv: server.ServerFromContext(ctx), modern: server.IsModernRequest(ctx)}
	if r.Params.Meta != nil {
		p.token = r.Params.Meta.ProgressToken
	}
	return p
}

// event implements execution.Request.OnEvent. Sending never blocks: a client
// that does not read fast enough loses notifications, never the result,
// and is told how many it lost before the next one that gets through.
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
		p.log(level, "console", clip(e.Log.Message, mcpLogNoteBytes))
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
	p.markDropped()
	p.count(p.srv.SendNotificationToClient(p.ctx, string(mcp.MethodNotificationProgress),
		map[string]any{"progressToken": p.token, "progress": p.sent, "message": msg}))
}

// log sends a log message to the client, where the request asked for
// them (see mcpProgress).
func (p *mcpProgress) log(level mcp.LoggingLevel, logger, text string) {
	if !p.modern && p.token == nil {
		return
	}
	p.markDropped()
	p.count(p.sendLog(level, logger, text))
}

func (p *mcpProgress) sendLog(level mcp.LoggingLevel, logger, text string) error {
	if p.modern {
		return p.srv.SendLogMessageToClient(p.ctx, mcp.NewLoggingMessageNotification(level, logger, text))
	}
	return p.srv.SendNotificationToClient(p.ctx, string(mcp.MethodNotificationMessage),
		map[string]any{"level": level, "logger": logger, "data": text})
}

// markDropped tells the client, when notifications were dropped, how
// many, before the next one.
func (p *mcpProgress) markDropped() {
	if p.dropped == 0 {
		return
	}
	msg := fmt.Sprintf("%d notifications were dropped: the client reads too slowly (the result has every console line and call)", p.dropped)
	if p.sendLog(mcp.LoggingLevelWarning, "pml", msg) == nil {
		p.dropped = 0
	}
}

// count notes a notification the library's full queue refused.
func (p *mcpProgress) count(err error) {
	if errors.Is(err, server.ErrNotificationChannelBlocked) {
		p.dropped++
	}
}

// clip cuts s to at most n bytes (on a character boundary) and says how
// much was left out.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	kept := truncateUTF8(s, n)
	return kept + fmt.Sprintf("… (%d bytes more; the result has the whole line)", len(s)-len(kept))
}

// logLevels maps console methods to MCP (syslog) levels.
var logLevels = map[string]mcp.LoggingLevel{
	"log":   mcp.LoggingLevelInfo,
	"info":  mcp.LoggingLevelInfo,
	"warn":  mcp.LoggingLevelWarning,
	"error": mcp.LoggingLevelError,
}
