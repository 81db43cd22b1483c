package mcp

import (
	"context"
	"encoding/json"
	"fmt"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/elicit"
)

// Questions asked in line. A 2025-11-25 server asks its client's user with
// elicitation/create while the call is in flight, on the call's own stream
// (or the session's GET stream), and holds the call open until it is
// answered: no suspended execution can answer that from another process,
// so the client declares the elicitation capability there only when it
// has someone to ask right now — Kind.Answerer, which only a front end whose
// caller is the person at the keyboard configures (pml run). 2026-07-28
// servers ask through input_required instead, which Call hands back as an
// *execution.Question (question).

// callKey marks a call's context with the tool it calls: a question that
// arrives on the call's own stream is handled under that context.
type callKey struct{}

// track marks ctx as a call of tool, and counts it among the server's
// calls in flight, so that a question can name the call it belongs to.
// Nothing is tracked without an answerer.
func (s *remote) track(ctx context.Context, tool string) (context.Context, func()) {
	if s.k.Answerer == nil {
		return ctx, func() {}
	}
	s.imu.Lock()
	if s.inflight == nil {
		s.inflight = map[string]int{}
	}
	s.inflight[tool]++
	s.imu.Unlock()
	return context.WithValue(ctx, callKey{}, tool), func() {
		s.imu.Lock()
		if s.inflight[tool]--; s.inflight[tool] <= 0 {
			delete(s.inflight, tool)
		}
		s.imu.Unlock()
	}
}

// askingTool is the tool a question asked under ctx belongs to: the call
// whose stream it came on, else the server's one tool in flight, else ""
// (several, or none: the server asked on its own).
func (s *remote) askingTool(ctx context.Context) string {
	if t, ok := ctx.Value(callKey{}).(string); ok {
		return t
	}
	s.imu.Lock()
	defer s.imu.Unlock()
	if len(s.inflight) != 1 {
		return ""
	}
	for t := range s.inflight {
		return t
	}
	return ""
}

// elicitHandler answers a 2025-11-25 server's elicitation/create in line
// (mcp-go's client calls it with the request's context, and sends back
// what it returns, or its error as a JSON-RPC error).
type elicitHandler struct{ s *remote }

func (h elicitHandler) Elicit(ctx context.Context, req mcpgo.ElicitationRequest) (*mcpgo.ElicitationResult, error) {
	s := h.s
	raw, err := json.Marshal(req.Params)
	if err != nil {
		return nil, err
	}
	// What the person reads must not show a secret the server quotes.
	q := elicit.Question{Server: s.cfg.Name, Tool: s.askingTool(ctx), Params: s.h.Redactor().JSON(raw)}
	r, err := s.k.Answerer.Answer(ctx, q)
	if err != nil {
		s.log.Warn("mcp server's question not answered", "tool", q.Tool, "err", err)
		return nil, fmt.Errorf("not answered: %w", err)
	}
	s.log.Info("mcp server's question answered in line", "tool", q.Tool, "action", r.Action)
	res := &mcpgo.ElicitationResult{ElicitationResponse: mcpgo.ElicitationResponse{Action: mcpgo.ElicitationResponseAction(r.Action)}}
	if r.Content != nil {
		res.Content = r.Content
	}
	return res, nil
}
