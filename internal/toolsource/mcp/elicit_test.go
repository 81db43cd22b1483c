package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// askingLegacyServer is a real mcp-go server that speaks 2025-11-25 only,
// whose tool ask_name asks its client's user with elicitation/create on
// the call's own stream and returns the elicitation result it got (or the
// error). Its message quotes the Authorization header the call came with,
// as a careless server might. initialize records the capabilities the
// client declared.
type askingLegacyServer struct {
	url string
	mu  sync.Mutex
	// declared is the client's initialize capabilities.
	declared json.RawMessage
}

func newAskingLegacyServer(t *testing.T) *askingLegacyServer {
	t.Helper()
	a := &askingLegacyServer{}
	m := server.NewMCPServer("asker", "1.0", server.WithToolCapabilities(true), server.WithElicitation())
	m.AddTool(mcpgo.NewTool("ask_name", readOnly),
		func(ctx context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			res, err := m.RequestElicitation(ctx, mcpgo.ElicitationRequest{Params: mcpgo.ElicitationParams{
				Message: "Who are you? (you sent " + r.Header.Get("Authorization") + ")",
				RequestedSchema: json.RawMessage(`{"type": "object", "properties": {
					"name": {"type": "string", "title": "Name", "default": "Ann"},
					"age": {"type": "integer", "minimum": 0}}, "required": ["age"]}`),
			}})
			if err != nil {
				return mcpgo.NewToolResultError("elicitation failed: " + err.Error()), nil
			}
			b, _ := json.Marshal(res)
			return mcpgo.NewToolResultText(string(b)), nil
		})
	sh := server.NewStreamableHTTPServer(m, server.WithStreamableHTTPProtocolVersions(mcpgo.ProtocolVersion20251125))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Capabilities json.RawMessage `json:"capabilities"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "initialize" {
			a.mu.Lock()
			a.declared = msg.Params.Capabilities
			a.mu.Unlock()
		}
		sh.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		_ = sh.Shutdown(context.Background())
	})
	a.url = hs.URL + "/mcp"
	return a
}

func (a *askingLegacyServer) capabilities() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return string(a.declared)
}

// recordingAnswerer answers through an elicit.Script and records what it
// was asked.
type recordingAnswerer struct {
	script *elicit.Script
	mu     sync.Mutex
	asked  []elicit.Question
}

func (r *recordingAnswerer) Answer(ctx context.Context, q elicit.Question) (elicit.Result, error) {
	r.mu.Lock()
	r.asked = append(r.asked, q)
	r.mu.Unlock()
	return r.script.Answer(ctx, q)
}

// TestInlineElicitation: a 2025-11-25 server asks while the call is in
// flight. With an answerer the pool declares form-mode elicitation, puts
// the question (scrubbed of the secret the server quotes, naming the call
// it came with) to the answerer, and sends back its answer with the form's
// defaults; the call gets the server's result. Without one the pool
// declares nothing, and the server cannot ask.
func TestInlineElicitation(t *testing.T) {
	t.Setenv("MCPCLIENT_TEST_BEARER", headerSecret)
	for _, tc := range []struct {
		name    string
		answers string // "" for no answerer
		wantErr bool   // the call fails, its message holding want
		want    []string
		wantNot []string
	}{
		{name: "accept, with a default filled in", answers: `[{"action": "accept", "content": {"age": 7}}]`,
			want: []string{`"action":"accept"`, `"age":7`, `"name":"Ann"`}},
		{name: "declined", answers: `{"s:ask_name": "decline"}`, want: []string{`"action":"decline"`}, wantNot: []string{`"content"`}},
		{name: "no answer left: cancelled", answers: `[]`, want: []string{`"action":"cancel"`}},
		{name: "an answer that does not fit the form", answers: `["accept"]`, wantErr: true,
			want: []string{"elicitation failed", "does not fit the form", "missing property 'age'"}},
		{name: "no answerer", wantErr: true, want: []string{"elicitation failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newAskingLegacyServer(t)
			cfg := Config{Config: toolsource.Config{Name: "s", Headers: map[string]string{"Authorization": "Bearer ${env:MCPCLIENT_TEST_BEARER}"}}, URL: srv.url, Transport: TransportStreamable}
			var rec *recordingAnswerer
			var opts []option
			if tc.answers != "" {
				script, err := elicit.ParseScript([]byte(tc.answers), io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				rec = &recordingAnswerer{script: script}
				opts = append(opts, withAnswerer(rec))
			}
			p := newTestPool(t, []Config{cfg}, opts...)
			waitTools(t, p, "s", "ask_name")
			out, err := call(t, p, "s", "ask_name", `{}`, CallOptions{ParseJSONText: true})
			if (err != nil) != tc.wantErr {
				t.Fatalf("call: %s, %v", out, err)
			}
			if err != nil {
				out = err.Error()
			}
			caps := srv.capabilities()
			if declared := strings.Contains(caps, `"elicitation":{"form":{}}`); declared != (rec != nil) {
				t.Errorf("initialize declared %s; want form-mode elicitation exactly when there is an answerer", caps)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("result %s: want %s", out, w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("result %s: want no %s", out, w)
				}
			}
			if rec == nil {
				return
			}
			if len(rec.asked) != 1 {
				t.Fatalf("asked %d questions: %+v", len(rec.asked), rec.asked)
			}
			q := rec.asked[0]
			if q.Server != "s" || q.Tool != "ask_name" || !strings.Contains(string(q.Params), "Who are you?") {
				t.Errorf("the question: %s %s", q.Who(), q.Params)
			}
			if strings.Contains(string(q.Params), secretMarker) {
				t.Errorf("the question shows a secret the server quoted: %s", q.Params)
			}
		})
	}
}
