package integration

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
)

// served is a running `pml serve`.
type served struct {
	base   string // http://127.0.0.1:PORT
	cmd    *exec.Cmd
	exited chan error // receives Wait's answer once; put it back after reading
}

// startServe runs the real binary on a free loopback port with its own
// cache, trace file and capability file, and no token; it is killed when
// the test ends.
func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bins.pml, append([]string{"serve", "--addr", "127.0.0.1:0", "--cache-dir", dir}, args...)...)
	cmd.Env = append(cmd.Environ(), app.EnvTracesFile+"="+dir+"/traces.jsonl", app.EnvCapFile+"="+dir+"/caps.json", app.EnvServeToken+"=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// The banner's first line says where it listens; the rest goes to the log.
	ready := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`listening on (http://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[1]
			}
			t.Log(sc.Text())
		}
		exited <- cmd.Wait() // after stderr is drained, as Wait requires
	}()
	select {
	case base := <-ready:
		return &served{base: base, cmd: cmd, exited: exited}
	case err := <-exited:
		exited <- err
		t.Fatalf("pml serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("pml serve did not come up")
	}
	return nil
}

// TestServeSafeByDefault runs the real binary as a user would: what a web
// page could send it is refused, a client holding GET /mcp gets 405, and
// SIGTERM stops it at once with exit 0.
func TestServeSafeByDefault(t *testing.T) {
	srv := startServe(t, "--no-demo-server")
	base, cmd, exited := srv.base, srv.cmd, srv.exited

	const code = `{"code": "return 1"}`
	tests := []struct {
		name, method, path string
		kv                 []string
		status             int
	}{
		{"text/plain body", "POST", "/execute", []string{"Content-Type", "text/plain"}, 415},
		{"form body", "POST", "/execute", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"rebinding Host", "POST", "/execute", []string{"Content-Type", "application/json", "Host", "evil.example"}, 403},
		{"cross-site Origin", "POST", "/execute", []string{"Content-Type", "application/json", "Origin", "https://evil.example"}, 403},
		{"JSON from loopback", "POST", "/execute", []string{"Content-Type", "application/json"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, tt.method, base+tt.path, strings.NewReader(code))
			for i := 0; i+1 < len(tt.kv); i += 2 {
				req.Header.Set(tt.kv[i], tt.kv[i+1])
			}
			req.Host = req.Header.Get("Host")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
		})
	}

	// A client that opens the MCP event stream and keeps it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /mcp: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}

	_ = cmd.Process.Signal(syscallTERM)
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("pml serve exited with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pml serve did not stop promptly on SIGTERM")
	}
}
