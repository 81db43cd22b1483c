package lambdamain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"testing"
)

func TestStart(t *testing.T) {
	handler := func(context.Context) error { return nil }
	wired := func(context.Context, *slog.Logger) (any, error) { return handler, nil }
	failed := func(context.Context, *slog.Logger) (any, error) { return nil, errors.New("no table") }
	precompile := func(args []string, _ *slog.Logger) int {
		if slices.Equal(args, []string{"--precompile", "dir"}) {
			return 0
		}
		return 2
	}
	tests := []struct {
		name      string
		f         Function
		args      []string
		wantServe bool
		wantCode  int
		wantLog   string // the one error logged, if any
	}{
		{"wired", Function{Init: wired}, nil, true, 0, ""},
		{"arguments ignored without Args", Function{Init: wired}, []string{"--precompile", "dir"}, true, 0, ""},
		{"precompile", Function{Init: wired, Args: precompile}, []string{"--precompile", "dir"}, false, 0, ""},
		{"bad arguments", Function{Init: wired, Args: precompile}, []string{"--bogus"}, false, 2, ""},
		{"Lambda passes no arguments", Function{Init: wired, Args: precompile}, []string{}, true, 0, ""},
		{"init failed", Function{Init: failed, Args: precompile}, nil, false, 1, "no table"},
		{"no handler", Function{Init: func(context.Context, *slog.Logger) (any, error) { return nil, nil }}, nil, false, 1, "lambdamain: Init returned no handler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Ready: once there is a handler to serve, and only then.
			ready := false
			tt.f.Ready = func() { ready = true }
			var logs bytes.Buffer
			h, code := start(context.Background(), tt.f, tt.args, slog.New(slog.NewJSONHandler(&logs, nil)))
			if (h != nil) != tt.wantServe || code != tt.wantCode || ready != tt.wantServe {
				t.Errorf("handler %v, code %d, ready %v; want a handler %v, code %d", h != nil, code, ready, tt.wantServe, tt.wantCode)
			}
			if tt.wantLog == "" {
				if logs.Len() != 0 {
					t.Errorf("logged %s", logs.Bytes())
				}
				return
			}
			var line struct{ Level, Msg, Err string }
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line.Level != "ERROR" || line.Msg != "init failed" || line.Err != tt.wantLog {
				t.Errorf("logged %s (%v); want one init failed line with err %q", logs.Bytes(), err, tt.wantLog)
			}
		})
	}
}
