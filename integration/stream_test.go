package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
)

// gateScript waits, with slow demo calls, until another execution sets
// the key it names in the demo server's store: a script whose end the test
// decides, so nothing here depends on timing.
func gateScript(key string) string {
	return `console.log("waiting for ` + key + `");
let polls = 0;
while (!(await mcp.demo.kv_get({key: "` + key + `"})).value) { polls++; await mcp.demo.sleep({ms: 20}); }
return polls`
}

// demoServer starts the demo MCP server, as pml serve would, and returns
// its streamable HTTP URL.
func demoServer(t *testing.T) string {
	t.Helper()
	ds, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ds.Close() })
	return ds.StreamableURL()
}

// openGate sets the key through a plain execution.
func openGate(t *testing.T, base, key string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"code": `await mcp.demo.kv_set({key: "` + key + `", value: true})`})
	resp, err := http.Post(base+"/execute", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("opening the gate: %d", resp.StatusCode)
	}
}

// TestExecuteEventStream is the README's `curl -N` against the real binary:
// call_end events arrive while the script still runs (the test opens the
// gate only after reading them), and the result event comes last.
func TestExecuteEventStream(t *testing.T) {
	srv := startServe(t, nil, "--mcp", "demo="+demoServer(t))
	body, _ := json.Marshal(map[string]any{"code": gateScript("sse-go"), "timeout_ms": 30000})
	req, _ := http.NewRequest("POST", srv.base+"/execute", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	seen := map[string]int{}
	opened := false
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			event = name
			seen[event]++
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if event == "result" {
			var r struct {
				Status int             `json:"status"`
				OK     bool            `json:"ok"`
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal([]byte(data), &r); err != nil || r.Status != 200 || !r.OK {
				t.Fatalf("result %s (%v)", data, err)
			}
			break
		}
		if event == "call_end" && strings.Contains(data, `"tool":"sleep"`) && !opened {
			if seen["log"] != 1 || seen["call_start"] < 2 {
				t.Errorf("before the first sleep ended: %v", seen)
			}
			openGate(t, srv.base, "sse-go")
			opened = true
		}
	}
	if !opened || seen["result"] != 1 {
		t.Fatalf("events %v (scan: %v); want call_end events, then the result", seen, sc.Err())
	}
	if seen["call_end"] != seen["call_start"] {
		t.Errorf("%d call_start, %d call_end", seen["call_start"], seen["call_end"])
	}
}

// TestMCPProgressFromServe: an MCP client that sends a progress token
// receives notifications/progress while execute_code's script makes slow
// calls, and its console output as log messages.
func TestMCPProgressFromServe(t *testing.T) {
	srv := startServe(t, nil, "--mcp", "demo="+demoServer(t))
	c := mcptest.Streamable(t, srv.base+"/mcp", mcp.ProtocolVersion20251125)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		progress []string
		logs     []string
		opened   = make(chan struct{})
		openOnce sync.Once
	)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		raw, _ := json.Marshal(n.Params)
		mu.Lock()
		defer mu.Unlock()
		switch n.Method {
		case "notifications/progress":
			progress = append(progress, string(raw))
			if strings.Contains(string(raw), "demo:sleep ended") {
				// Mid-run: the script cannot end before the gate opens.
				openOnce.Do(func() { close(opened) })
			}
		case "notifications/message":
			logs = append(logs, string(raw))
		}
	})
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		var req mcp.CallToolRequest
		req.Params.Name = "execute_code"
		req.Params.Arguments = map[string]any{"code": gateScript("mcp-go"), "timeout_ms": 30000}
		req.Params.Meta = &mcp.Meta{ProgressToken: 7}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case <-opened:
	case res := <-done:
		t.Fatalf("execute_code ended before any progress: %+v", res)
	case <-ctx.Done():
		t.Fatal("no progress notification")
	}
	openGate(t, srv.base, "mcp-go")
	res := <-done
	if res == nil || res.IsError {
		t.Fatalf("execute_code: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) == 0 || !strings.Contains(logs[0], "waiting for mcp-go") {
		t.Errorf("log messages: %q", logs)
	}
	if !strings.Contains(progress[0], `"progressToken":7`) {
		t.Errorf("progress: %q", progress)
	}
}
