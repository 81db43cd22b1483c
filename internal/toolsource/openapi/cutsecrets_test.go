package openapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// echoKey is the API key the echoing service is configured with.
const echoKey = "k3y-SECRET-0123456789abcdef"

// echoDoc has two operations whose answers quote the request's X-Api-Key
// after pad bytes of the script's choosing: fail (an error body) and blob
// (a binary body).
const echoDoc = docHead + `"paths":{
  "/fail":{"get":{"operationId":"fail","parameters":[{"name":"pad","in":"query","schema":{"type":"integer"}}],"responses":{"200":{"description":"ok"}}}},
  "/blob":{"get":{"operationId":"blob","parameters":[{"name":"pad","in":"query","schema":{"type":"integer"}}],
    "responses":{"200":{"description":"ok","content":{"application/octet-stream":{"schema":{"type":"string","format":"binary"}}}}}}}}}`

// newEchoService serves echoDoc's operations.
func newEchoService(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pad, _ := strconv.Atoi(r.URL.Query().Get("pad"))
		key := r.Header.Get("X-Api-Key")
		switch r.URL.Path {
		case "/openapi.json":
			_, _ = io.WriteString(w, echoDoc)
		case "/fail":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, strings.Repeat("x", pad)+key+strings.Repeat("y", 100))
		case "/blob":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(append(append([]byte{0x89, 'P', 'N', 'G', 0, 1, 2}[:pad%8], key...), 0xff, 0xfe, 0))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// trailingPrefix is the longest start of secret that s ends with, once
// a cut's mark is taken off.
func trailingPrefix(s, secret string) string {
	s = strings.TrimSuffix(s, "…")
	for k := len(secret); k > 0; k-- {
		if strings.HasSuffix(s, secret[:k]) {
			return secret[:k]
		}
	}
	return ""
}

// TestErrorBodyCutLeavesNoSecret: a script that pads the service's echo
// of its key so that the error body's cut falls anywhere in the key
// (all but its last character kept, and every other split) reads no part
// of the key.
func TestErrorBodyCutLeavesNoSecret(t *testing.T) {
	srv := newEchoService(t)
	src := newSource(t, Config{Config: toolsource.Config{Name: "echo", Headers: map[string]string{"X-Api-Key": echoKey}},
		Spec: srv.URL + "/openapi.json"})
	for pad := maxErrorBody - len(echoKey) - 2; pad <= maxErrorBody+2; pad++ {
		_, err := src.Call(context.Background(), catalog.Tool{Server: "echo", Name: "fail"},
			json.RawMessage(fmt.Sprintf(`{"pad": %d}`, pad)), execution.CallOptions{})
		fe := fault.As(err)
		if fe == nil || fe.Code != fault.ToolError {
			t.Fatalf("pad %d: %v; want a TOOL_ERROR", pad, err)
		}
		if strings.Contains(fe.Message, "SECRET") {
			t.Errorf("pad %d: the message holds the key: …%s", pad, fe.Message[max(0, len(fe.Message)-60):])
		}
		if p := trailingPrefix(fe.Message, echoKey); p != "" {
			t.Errorf("pad %d: the message ends with %q, the start of the key", pad, p)
		}
	}
}

// TestBinaryResultMasked: a binary answer that carries the key (at each
// offset within base64's 3-byte groups, and a key short enough that its
// base64 middle is no form the redactor matches) reaches the script as
// {content_type, base64} still, valid base64 whose bytes hold the mask
// where the key was: masked before it is encoded.
func TestBinaryResultMasked(t *testing.T) {
	srv := newEchoService(t)
	for _, key := range []string{echoKey, "S3CR7t"} {
		src := newSource(t, Config{Config: toolsource.Config{Name: "echo", Headers: map[string]string{"X-Api-Key": key}},
			Spec: srv.URL + "/openapi.json"})
		for pad := range 4 {
			out, err := src.Call(context.Background(), catalog.Tool{Server: "echo", Name: "blob"},
				json.RawMessage(fmt.Sprintf(`{"pad": %d}`, pad)), execution.CallOptions{})
			if err != nil {
				t.Fatalf("key %q pad %d: %v", key, pad, err)
			}
			var got struct {
				ContentType string `json:"content_type"`
				Base64      string `json:"base64"`
			}
			if err := json.Unmarshal(out, &got); err != nil || got.ContentType != "application/octet-stream" {
				t.Fatalf("key %q pad %d: %s (%v); want {content_type, base64}", key, pad, out, err)
			}
			raw, err := base64.StdEncoding.DecodeString(got.Base64)
			if err != nil {
				t.Errorf("key %q pad %d: base64 %q does not decode: %v", key, pad, got.Base64, err)
				continue
			}
			if strings.Contains(string(raw), key) || !strings.Contains(string(raw), "[REDACTED]") {
				t.Errorf("key %q pad %d: the script reads %q", key, pad, raw)
			}
		}
	}
}

// TestDescriptionCutLeavesNoSecret: a document whose description quotes
// a configured value where the description's cut falls shows no part of
// it in the catalog.
func TestDescriptionCutLeavesNoSecret(t *testing.T) {
	for _, pad := range []int{maxDescription - len(echoKey) + 1, maxDescription - 5, maxDescription - 1} {
		desc := strings.Repeat("d", pad) + echoKey + " more"
		doc := docHead + `"paths":{"/d":{"get":{"operationId":"d","description":` + strconv.Quote(desc) + `,"responses":{"200":{"description":"ok"}}}}}}`
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, doc) }))
		src := newSource(t, Config{Config: toolsource.Config{Name: "d", Headers: map[string]string{"X-Api-Key": echoKey}},
			Spec: srv.URL + "/openapi.json"})
		tools, err := src.Tools(context.Background())
		srv.Close()
		if err != nil || len(tools) != 1 {
			t.Fatalf("pad %d: %v, %v", pad, tools, err)
		}
		got := tools[0].Description
		if strings.Contains(got, "SECRET") {
			t.Errorf("pad %d: the description holds the key", pad)
		}
		if p := trailingPrefix(got, echoKey); p != "" {
			t.Errorf("pad %d: the description ends with %q, the start of the key", pad, p)
		}
		if len(got) > maxDescription+len("…") {
			t.Errorf("pad %d: a description of %d bytes", pad, len(got))
		}
	}
}
