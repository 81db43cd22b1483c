package bench

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestProcBytes: the fields asked, in bytes and in order; a missing field
// is an error, an unreadable file errNoRSS.
func TestProcBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(path, []byte("Name:\tx\nVmRSS:\t   2048 kB\nRssAnon:\t  12 kB\nPss: 7 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := procBytes(path, "RssAnon", "VmRSS", "Pss")
	if err != nil || !slices.Equal(got, []uint64{12 << 10, 2048 << 10, 7 << 10}) {
		t.Errorf("%v, %v", got, err)
	}
	if _, err := procBytes(path, "VmRSS", "RssShmem"); err == nil || errors.Is(err, errNoRSS) {
		t.Errorf("a missing field: %v", err)
	}
	if _, err := procBytes(filepath.Join(path, "none"), "VmRSS"); !errors.Is(err, errNoRSS) {
		t.Errorf("an unreadable file: %v", err)
	}
}
