package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// writeLedger is a tiny key-value MCP server (streamable HTTP) that keeps count
// of every write it applies, for the continuation tests: kv_set is an
// effect (not read-only, not destructive, not said idempotent), kv_get,
// kv_list and sleep are reads. With dedup it honours idempotency keys as
// a Stripe-style server does: a write whose key (from _meta
// io.pml/idempotency-key) it applied already is answered again without
// being applied again. It can hold the first write of one key: applied,
// and then unanswered until released, as a server whose answer a crash
// lost.
type writeLedger struct {
	dedup bool
	url   string
	hs    *http.Server

	mu      sync.Mutex
	values  map[string]any
	applied map[string]int    // key → writes applied
	keys    map[string]string // idempotency key → the key it wrote
	writes  int               // writes received, applied or not
	holdKey string
	held    chan struct{} // closed when the held write arrives
	release chan struct{} // closed to answer it
}

func startLedger(t *testing.T, dedup bool) *writeLedger {
	t.Helper()
	l := &writeLedger{dedup: dedup, values: map[string]any{}, applied: map[string]int{}, keys: map[string]string{}}
	m := server.NewMCPServer("ledger", "1.0.0", server.WithToolCapabilities(true))
	no, yes := false, true
	write := mcp.ToolAnnotation{ReadOnlyHint: &no, DestructiveHint: &no, IdempotentHint: &no}
	read := mcp.ToolAnnotation{ReadOnlyHint: &yes, DestructiveHint: &no}
	m.AddTool(mcp.NewTool("kv_set", mcp.WithDescription("Store a value under a key."), mcp.WithToolAnnotation(write),
		mcp.WithString("key", mcp.Required()), mcp.WithNumber("value")), l.set)
	m.AddTool(mcp.NewTool("kv_get", mcp.WithDescription("Read a key."), mcp.WithToolAnnotation(read), mcp.WithString("key", mcp.Required())), l.get)
	m.AddTool(mcp.NewTool("kv_list", mcp.WithDescription("List the keys with a prefix."), mcp.WithToolAnnotation(read), mcp.WithString("prefix")), l.list)
	m.AddTool(mcp.NewTool("sleep", mcp.WithDescription("Wait ms milliseconds."), mcp.WithToolAnnotation(read), mcp.WithNumber("ms")), l.sleep)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.url = "http://" + ln.Addr().String() + "/mcp"
	l.hs = &http.Server{Handler: server.NewStreamableHTTPServer(m, server.WithStateLess(true)), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = l.hs.Serve(ln) }()
	t.Cleanup(func() {
		l.mu.Lock()
		if l.release != nil {
			select {
			case <-l.release:
			default:
				close(l.release)
			}
		}
		l.mu.Unlock()
		_ = l.hs.Close()
	})
	return l
}

// config is the ledger's block of a server list, named name.
func (l *writeLedger) config(name string) string {
	return fmt.Sprintf(`{"name": %q, "url": %q, "transport": "streamable", "idempotency_keys": %v}`, name, l.url, l.dedup)
}

// hold makes the first write of key be applied and then left unanswered
// until unhold; the returned channel is closed when it arrives.
func (l *writeLedger) hold(key string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holdKey, l.held, l.release = key, make(chan struct{}), make(chan struct{})
	return l.held
}

func (l *writeLedger) unhold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.release != nil {
		select {
		case <-l.release:
		default:
			close(l.release)
		}
	}
}

func idempotencyKey(req mcp.CallToolRequest) string {
	if req.Params.Meta == nil {
		return ""
	}
	k, _ := req.Params.Meta.AdditionalFields["io.pml/idempotency-key"].(string)
	return k
}

func (l *writeLedger) set(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	key := req.GetString("key", "")
	idem := idempotencyKey(req)
	l.mu.Lock()
	l.writes++
	if prev, ok := l.keys[idem]; l.dedup && idem != "" && ok {
		l.mu.Unlock()
		return mcp.NewToolResultStructuredOnly(map[string]any{"stored": prev, "replayed": true}), nil
	}
	l.values[key] = req.GetFloat("value", 0)
	l.applied[key]++
	if idem != "" {
		l.keys[idem] = key
	}
	var wait chan struct{}
	if key == l.holdKey && l.held != nil {
		l.holdKey = ""
		close(l.held)
		wait = l.release
	}
	l.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return nil, errors.New("the answer was lost")
	}
	return mcp.NewToolResultStructuredOnly(map[string]any{"stored": key}), nil
}

func (l *writeLedger) get(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.values[req.GetString("key", "")]
	return mcp.NewToolResultStructuredOnly(map[string]any{"found": ok, "value": v}), nil
}

func (l *writeLedger) list(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := []string{}
	for k := range l.values {
		if strings.HasPrefix(k, req.GetString("prefix", "")) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return mcp.NewToolResultStructuredOnly(map[string]any{"keys": keys}), nil
}

func (l *writeLedger) sleep(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	t := time.NewTimer(time.Duration(req.GetFloat("ms", 0)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return mcp.NewToolResultStructuredOnly(map[string]any{"slept": true}), nil
}

// times is how often the write of key was applied.
func (l *writeLedger) times(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applied[key]
}

// appliedIdem reports whether the write carrying idempotency key idem
// was applied.
func (l *writeLedger) appliedIdem(idem string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.keys[idem]
	return ok
}

// twice lists the keys written more than once.
func (l *writeLedger) twice() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, n := range l.applied {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s×%d", k, n))
		}
	}
	sort.Strings(out)
	return out
}

// ledgerScript makes 10 writes of prefix+i on server between reads (a
// read is call 3i+1, a write 3i+2, the pause, a read too, 3i+3); a write
// that fails is caught and its code kept in what it returns.
func ledgerScript(server, prefix string, pauseMS int) string {
	return fmt.Sprintf(`const out = []
for (let i = 0; i < 10; i++) {
  await mcp.%[1]s.kv_get({key: %[2]q + i})
  try { await mcp.%[1]s.kv_set({key: %[2]q + i, value: i}); out.push("ok") } catch (e) { out.push(e.code) }
  await mcp.%[1]s.sleep({ms: %[3]d})
}
return out`, server, prefix, pauseMS)
}

// contDoc is the part of an execution's document the continuation tests
// read.
type contDoc struct {
	Status string          `json:"status"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code, Message string
	} `json:"error"`
	Effects []struct {
		CallID int    `json:"call_id"`
		Key    string `json:"key"`
		Status string `json:"status"`
	} `json:"effects"`
}

// waitEnded polls an execution's document until it has ended, at most
// within.
func waitEnded(t *testing.T, base, id string, within time.Duration) contDoc {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(base + "/executions/" + id)
		if err == nil {
			var d contDoc
			derr := json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			if derr == nil && resp.StatusCode == 200 && d.Status != "running" && d.Status != "" {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s had not ended within %v", id, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
