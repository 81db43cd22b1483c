package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hostileCase is one request a web page (or a rebinding attacker) could
// make, and what the server must answer.
type hostileCase struct {
	name, method, path string
	header             http.Header
	body               string
	status             int
	code               string // the fault code in the JSON error, "" for a success
}

// do sends tc to base and checks its status and, for a failure, the JSON
// error shape and code.
func (tc hostileCase) do(t *testing.T, base string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, tc.method, base+tc.path, strings.NewReader(tc.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range tc.header {
		req.Header[k] = vs
	}
	if h := tc.header.Get("Host"); h != "" {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	if resp.StatusCode != tc.status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
	}
	if tc.code == "" {
		return resp
	}
	var e struct {
		OK    *bool `json:"ok"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.OK == nil || *e.OK || e.Error.Code != tc.code || e.Error.Message == "" {
		t.Fatalf("body %s is not a JSON error with code %s (%v)", raw, tc.code, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q", ct)
	}
	return resp
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// TestJSONBodiesOnly: a web page can POST text/plain, form or multipart
// bodies cross-site without a CORS preflight, so every POST route must
// refuse them. This holds with or without the serve guard.
func TestJSONBodiesOnly(t *testing.T) {
	srv := newServer(t)
	exec := `{"code": "return 1"}`
	mcpCall := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"return 1"}}}`
	tests := []hostileCase{
		{"text/plain execute", "POST", "/execute", hdr("Content-Type", "text/plain"), exec, 415, "INVALID_REQUEST"},
		{"text/plain with charset", "POST", "/execute", hdr("Content-Type", "text/plain;charset=UTF-8"), exec, 415, "INVALID_REQUEST"},
		{"form execute", "POST", "/execute", hdr("Content-Type", "application/x-www-form-urlencoded"), exec, 415, "INVALID_REQUEST"},
		{"multipart execute", "POST", "/execute", hdr("Content-Type", "multipart/form-data; boundary=x"), exec, 415, "INVALID_REQUEST"},
		{"no content type", "POST", "/execute", nil, exec, 415, "INVALID_REQUEST"},
		{"malformed content type", "POST", "/execute", hdr("Content-Type", "application/json; ="), exec, 415, "INVALID_REQUEST"},
		{"text/plain capability", "POST", "/capabilities", hdr("Content-Type", "text/plain"), `{"name": "a:b", "code": "return 1"}`, 415, "INVALID_REQUEST"},
		{"text/plain MCP call", "POST", "/mcp", hdr("Content-Type", "text/plain"), mcpCall, 415, "INVALID_REQUEST"},
		{"JSON", "POST", "/execute", hdr("Content-Type", "application/json"), exec, 200, ""},
		{"JSON with charset", "POST", "/execute", hdr("Content-Type", "application/json; charset=utf-8"), exec, 200, ""},
		{"JSON in capitals", "POST", "/execute", hdr("Content-Type", "Application/JSON"), exec, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.do(t, srv.URL) })
	}
}

// TestGetMCPIsRefused: the endpoint is stateless and sends nothing
// unprompted, so GET /mcp must answer at once instead of holding an event
// stream open (which kept `pml serve` from shutting down).
func TestGetMCPIsRefused(t *testing.T) {
	srv := newServer(t)
	for _, method := range []string{"GET", "DELETE"} {
		tc := hostileCase{method + " /mcp", method, "/mcp", hdr("Accept", "text/event-stream"), "", 405, "INVALID_REQUEST"}
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.do(t, srv.URL)
			if allow := resp.Header.Get("Allow"); allow != "POST" {
				t.Fatalf("Allow %q, want POST", allow)
			}
		})
	}
}
