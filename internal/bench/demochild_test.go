package bench

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestChildDemo: the demo server in a process of its own serves where its
// greeting says, and stops when closed; a command that exits first fails.
func TestChildDemo(t *testing.T) {
	ctx := context.Background()
	c, err := startChildDemo(ctx, testDemoCommand(ctx))
	if err != nil {
		t.Fatal(err)
	}
	url := c.StreamableURL()
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("url %q", url)
	}
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	if _, err := http.Post(url, "application/json", strings.NewReader(`{}`)); err == nil {
		t.Error("the demo server still answers after Close")
	}

	if _, err := startChildDemo(ctx, exec.Command("true")); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("a command that exits at once: %v", err)
	}
}

// TestStillHeld: a connection with nothing to read is held; one answered
// is not.
func TestStillHeld(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1)
			if _, err := c.Read(buf); err == nil && buf[0] == 'a' {
				_, _ = c.Write([]byte("answer"))
			}
			defer c.Close()
		}
	}()
	dial := func(first string) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(first)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held, answered := dial("h"), dial("a")
	time.Sleep(50 * time.Millisecond)
	if !stillHeld(held) {
		t.Error("a connection nothing was written to is not held")
	}
	if stillHeld(answered) {
		t.Error("an answered connection is held")
	}
}
