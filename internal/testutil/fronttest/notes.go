package fronttest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// Notes collects the notifications a client receives. The client's
// goroutine only sends them on; got belongs to the test's goroutine.
type Notes struct {
	ch  chan mcp.JSONRPCNotification
	got []mcp.JSONRPCNotification
}

// Listen collects c's notifications from now on.
func Listen(c *client.Client) *Notes {
	n := &Notes{ch: make(chan mcp.JSONRPCNotification, 1000)}
	c.OnNotification(func(m mcp.JSONRPCNotification) { n.ch <- m })
	return n
}

// WaitFor blocks until a notification of method whose params contain
// text has arrived.
func (n *Notes) WaitFor(t *testing.T, method, text string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !n.Has(method, text) {
		select {
		case m := <-n.ch:
			n.got = append(n.got, m)
		case <-deadline:
			t.Fatalf("no %s with %q; got %+v", method, text, n.List())
		}
	}
}

// Has reports whether a notification of method whose params contain text
// has arrived.
func (n *Notes) Has(method, text string) bool {
	for _, m := range n.List() {
		raw, _ := json.Marshal(m.Params)
		if m.Method == method && strings.Contains(string(raw), text) {
			return true
		}
	}
	return false
}

// List returns every notification received so far.
func (n *Notes) List() []mcp.JSONRPCNotification {
	for {
		select {
		case m := <-n.ch:
			n.got = append(n.got, m)
		default:
			return n.got
		}
	}
}
