package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

// TestTransportLogger: only a cancelled post of an answer leaves the Info
// log; every other record, and that one at Debug, passes as it came.
func TestTransportLogger(t *testing.T) {
	// As mcp-go wraps it: its own message around net/http's *url.Error.
	postCancelled := fmt.Errorf("failed to send request: %w", &url.Error{Op: "Post", URL: "http://127.0.0.1/mcp", Err: context.Canceled})
	tests := []struct {
		name  string
		level slog.Level // the log's level
		msg   string
		err   error
		kept  bool
	}{
		{"answer's post cancelled", slog.LevelInfo, sendResponseFailed, postCancelled, false},
		{"answer's post cancelled, debug log", slog.LevelDebug, sendResponseFailed, postCancelled, true},
		{"answer's post refused", slog.LevelInfo, sendResponseFailed, errors.New("connection refused"), true},
		{"another failure, cancelled", slog.LevelInfo, "SSE stream error", postCancelled, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := transportLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tt.level}))).With("mcp_server", "ev")
			log.Error(tt.msg, "err", tt.err)
			if got := strings.Contains(buf.String(), tt.msg); got != tt.kept {
				t.Fatalf("logged %q; want it kept: %v", buf.String(), tt.kept)
			}
			if tt.kept && !strings.Contains(buf.String(), `"mcp_server":"ev"`) {
				t.Errorf("the attributes were lost: %s", buf.String())
			}
		})
	}
}
