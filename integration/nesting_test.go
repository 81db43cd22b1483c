package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// nested is deeply nested code of one shape, at a number of levels.
type nested struct {
	shape, code string
	levels      int
	limit       string // the limit the answer names
	status      int    // the HTTP status it gets
}

// answerWithin is how long a refusal may take on a loaded machine (a pml
// process's start included); the pre-scan answers in milliseconds, and the
// test logs what it took. Unbounded, these inputs took minutes or crashed.
const answerWithin = 15 * time.Second

// nestedInputs are the shapes that took `pml serve` down (a stack overflow
// in esbuild), half a million levels deep (about 1 MB: over the default
// code size, refused as code_size before any parser), and 120,000 levels
// deep (under 256 KiB: refused as code_depth by the pre-scan), each under
// the 1 MiB request body limit.
func nestedInputs() []nested {
	shapes := []struct{ name, pre, open, mid, close string }{
		{"brackets", "return ", "[", "", "]"},
		{"parentheses", "return ", "(", "1", ")"},
		{"member chain", "return a", ".a", "", ""},
		{"braces", "", "{", "", "}"},
	}
	var out []nested
	for _, s := range shapes {
		for _, n := range []int{500_000, 120_000} {
			c := nested{shape: s.name, levels: n, limit: fault.LimitCodeDepth, status: http.StatusUnprocessableEntity,
				code: s.pre + strings.Repeat(s.open, n) + s.mid + strings.Repeat(s.close, n)}
			if len(c.code) > 256<<10 {
				c.limit, c.status = fault.LimitCodeSize, http.StatusRequestEntityTooLarge
			}
			out = append(out, c)
		}
	}
	return out
}

func (n nested) String() string {
	return fmt.Sprintf("%s %dk levels (%d KB)", n.shape, n.levels/1000, len(n.code)>>10)
}

// checkAnswer fails unless took is within answerWithin, and logs it.
func checkAnswer(t *testing.T, front string, n nested, took time.Duration) {
	t.Helper()
	t.Logf("%s: %v answered in %v", front, n, took.Round(time.Millisecond))
	if took > answerWithin {
		t.Errorf("%s: %v took %v to answer", front, n, took)
	}
}

// postDoc posts body to url and returns the status and decoded answer.
func postDoc(ctx context.Context, url string, body any) (int, map[string]any, error) {
	return postDocWith(ctx, url, body, nil)
}

// postDocWith is postDoc with more request headers.
func postDocWith(ctx context.Context, url string, body any, headers map[string]string) (int, map[string]any, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(string(raw)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("status %d, not JSON: %.200s", resp.StatusCode, data)
	}
	return resp.StatusCode, out, nil
}

// errorOf returns the code and limit of an answer's error object.
func errorOf(v any) (code, limit string) {
	e, _ := v.(map[string]any)
	code, _ = e["code"].(string)
	limit, _ = e["limit"].(string)
	return code, limit
}

// TestNestingRefusedByServe sends deeply nested code to every front of a
// real `pml serve` — POST /execute, POST /capabilities, and /mcp's
// execute_code and save_capability — and checks each is refused with
// LIMIT_EXCEEDED (code_size or code_depth, a 4xx over HTTP) at once, and
// that the process is still there and runs a trivial script afterwards.
func TestNestingRefusedByServe(t *testing.T) {
	srv := startServe(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alive := func(after string) {
		t.Helper()
		select {
		case err := <-srv.exited:
			t.Fatalf("pml serve exited after %s: %v", after, err)
		default:
		}
		status, r, err := postDoc(ctx, srv.base+"/execute", map[string]any{"code": "return 40 + 2"})
		if err != nil || status != http.StatusOK || r["result"] != float64(42) {
			t.Fatalf("after %s, a trivial script: %d %v %v", after, status, r, err)
		}
	}
	for _, n := range nestedInputs() {
		t.Run(n.String(), func(t *testing.T) {
			start := time.Now()
			status, r, err := postDoc(ctx, srv.base+"/execute", map[string]any{"code": n.code})
			if err != nil {
				t.Fatalf("POST /execute: %v", err)
			}
			checkAnswer(t, "POST /execute", n, time.Since(start))
			if code, limit := errorOf(r["error"]); status != n.status || code != string(fault.LimitExceeded) || limit != n.limit {
				t.Errorf("POST /execute: %d %s %s, want %d LIMIT_EXCEEDED %s", status, code, limit, n.status, n.limit)
			}

			start = time.Now()
			status, r, err = postDoc(ctx, srv.base+"/capabilities", map[string]any{"name": "deep:shape", "code": n.code})
			if err != nil {
				t.Fatalf("POST /capabilities: %v", err)
			}
			checkAnswer(t, "POST /capabilities", n, time.Since(start))
			if code, limit := errorOf(r["error"]); status != n.status || code != string(fault.LimitExceeded) || limit != n.limit {
				t.Errorf("POST /capabilities: %d %s %s, want %d LIMIT_EXCEEDED %s", status, code, limit, n.status, n.limit)
			}

			for _, tool := range []string{"execute_code", "save_capability"} {
				args := map[string]any{"code": n.code}
				if tool == "save_capability" {
					args["name"] = "deep:shape"
				}
				start = time.Now()
				// A 2026-07-28 request: no initialize, no session (pml
				// serve keeps sessions for older clients, whose requests
				// need one).
				status, r, err = postDocWith(ctx, srv.base+"/mcp", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
					"params": map[string]any{"name": tool, "arguments": args, "_meta": map[string]any{
						"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
						"io.modelcontextprotocol/clientCapabilities": map[string]any{}}}},
					map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool,
						"Accept": "application/json, text/event-stream"})
				if err != nil {
					t.Fatalf("/mcp %s: %v", tool, err)
				}
				checkAnswer(t, "/mcp "+tool, n, time.Since(start))
				res, _ := r["result"].(map[string]any)
				text, _ := json.Marshal(res["content"])
				if status != http.StatusOK || res["isError"] != true || !strings.Contains(string(text), "LIMIT_EXCEEDED") {
					t.Errorf("/mcp %s: %d %.300s, want a tool error LIMIT_EXCEEDED", tool, status, text)
				}
				if tool == "execute_code" {
					sc, _ := res["structuredContent"].(map[string]any)
					if code, limit := errorOf(sc["error"]); code != string(fault.LimitExceeded) || limit != n.limit {
						t.Errorf("/mcp execute_code: structured error %s %s, want LIMIT_EXCEEDED %s", code, limit, n.limit)
					}
				}
			}
			alive(n.String())
		})
	}
}

// TestNestingRefusedByRun: `pml run` refuses deeply nested code, from a
// file and from -e, with its ordinary failure (exit 1, the error in its
// JSON output), not a crash.
func TestNestingRefusedByRun(t *testing.T) {
	dir := t.TempDir()
	run := func(t *testing.T, n nested, args ...string) {
		t.Helper()
		start := time.Now()
		cmd := exec.Command(bins.pml, append([]string{"run", "--cache-dir", dir}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		checkAnswer(t, "pml run "+args[0], n, time.Since(start))
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("pml run: %v, want exit 1; stderr: %.500s", err, stderr.String())
		}
		var r map[string]any
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("pml run output: %v: %.300s", err, out)
		}
		if code, limit := errorOf(r["error"]); code != string(fault.LimitExceeded) || limit != n.limit {
			t.Errorf("pml run: %s %s, want LIMIT_EXCEEDED %s", code, limit, n.limit)
		}
	}
	for _, n := range nestedInputs() {
		t.Run(n.String(), func(t *testing.T) {
			file := filepath.Join(dir, "deep.js")
			if err := os.WriteFile(file, []byte(n.code), 0o600); err != nil {
				t.Fatal(err)
			}
			run(t, n, file)
		})
	}
	// An argument is at most 128 KiB on Linux: 60,000 levels fit.
	n := nested{shape: "parentheses", levels: 60_000, limit: fault.LimitCodeDepth,
		code: "return " + strings.Repeat("(", 60_000) + "1" + strings.Repeat(")", 60_000)}
	t.Run(n.String()+" with -e", func(t *testing.T) { run(t, n, "-e", n.code) })
}

// TestNestingRefusedByLambda sends deeply nested code to the execute
// function behind the Lambda emulator, invoked directly and through an API
// Gateway event: each is refused with LIMIT_EXCEEDED (4xx for the event),
// and the function's process is still the one that answers a trivial
// script afterwards: none died.
func TestNestingRefusedByLambda(t *testing.T) {
	s := newStack(t)
	trivial := func(after string) {
		t.Helper()
		var r execution.Response
		if err := json.Unmarshal(s.invoke(t, "execute", map[string]any{"code": "return 40 + 2"}, ""), &r); err != nil || !r.OK || string(r.Result) != "42" {
			t.Fatalf("after %s, a trivial script: %+v %v", after, r.Error, err)
		}
		if n := s.emu.Exited("execute"); n > 0 {
			t.Fatalf("after %s, %d execute processes died", after, n)
		}
	}
	trivial("starting")
	for _, n := range nestedInputs() {
		t.Run(n.String(), func(t *testing.T) {
			start := time.Now()
			var r execution.Response
			if err := json.Unmarshal(s.invoke(t, "execute", map[string]any{"code": n.code}, ""), &r); err != nil {
				t.Fatal(err)
			}
			checkAnswer(t, "Invoke", n, time.Since(start))
			if r.OK || r.Error == nil || r.Error.Code != fault.LimitExceeded || r.Error.Limit != n.limit {
				t.Errorf("Invoke: %+v, want LIMIT_EXCEEDED %s", r.Error, n.limit)
			}

			body, _ := json.Marshal(map[string]any{"code": n.code})
			start = time.Now()
			var resp events.APIGatewayV2HTTPResponse
			if err := json.Unmarshal(s.invoke(t, "execute", httpEvent("POST", "/execute", string(body)), ""), &resp); err != nil {
				t.Fatal(err)
			}
			checkAnswer(t, "API Gateway event", n, time.Since(start))
			var out map[string]any
			_ = json.Unmarshal([]byte(resp.Body), &out)
			if code, limit := errorOf(out["error"]); resp.StatusCode != n.status || code != string(fault.LimitExceeded) || limit != n.limit {
				t.Errorf("API Gateway event: %d %s %s, want %d LIMIT_EXCEEDED %s", resp.StatusCode, code, limit, n.status, n.limit)
			}
			trivial(n.String())
		})
	}
}
