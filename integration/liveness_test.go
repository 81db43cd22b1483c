package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/app"
)

// signalServer is a real MCP server with one tool, started, that tells the
// test each time a script calls it: hostile scripts call it first, so the
// test knows they are past their start and into their loops.
func signalServer(t *testing.T) (url string, started <-chan struct{}) {
	ch := make(chan struct{}, 16)
	m := server.NewMCPServer("signal", "1.0.0", server.WithToolCapabilities(true))
	m.AddTool(mcp.NewTool("started", mcp.WithDescription("Announces that a script started."), mcp.WithReadOnlyHintAnnotation(true)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			ch <- struct{}{}
			return mcp.NewToolResultText("ok"), nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(m, server.WithStateLess(true)))
	t.Cleanup(hs.Close)
	return hs.URL, ch
}

// served is a running `pml serve`, started by startServe.
type served struct {
	base   string
	lines  <-chan string // its stderr, line by line (dropped when not read)
	proc   *os.Process
	exited <-chan error // its exit status, once it has exited
}

// startServe starts `pml serve` on a free loopback port with its own
// stores and no demo server, env added, and waits until it listens. The
// test's cleanup kills it.
func startServe(t *testing.T, env []string, args ...string) *served {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bins.pml, append([]string{"serve", "--addr", "127.0.0.1:0", "--no-demo-server", "--cache-dir", dir}, args...)...)
	cmd.Env = append(cmd.Environ(), app.EnvTracesFile+"="+dir+"/traces.jsonl", app.EnvCapFile+"="+dir+"/caps.json", app.EnvServeToken+"=")
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4096)
	exited := make(chan error, 1)
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	ready := make(chan string, 1)
	go func() {
		defer close(done)
		listening := regexp.MustCompile(`listening on (http://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[1]
			}
			select {
			case lines <- sc.Text():
			default:
			}
		}
		exited <- cmd.Wait() // after stderr is drained, as Wait requires
	}()
	select {
	case base := <-ready:
		return &served{base: base, lines: lines, proc: cmd.Process, exited: exited}
	case <-done:
		t.Fatal("pml serve exited before it listened")
	case <-time.After(60 * time.Second):
		t.Fatal("pml serve did not come up")
	}
	return nil
}

// execute posts code to /execute and returns the decoded response.
func execute(ctx context.Context, base, code string, timeoutMS int) (map[string]any, error) {
	body, _ := json.Marshal(map[string]any{"code": code, "timeout_ms": timeoutMS})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/execute", strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("status %d: %w", resp.StatusCode, err)
	}
	return out, nil
}

// TestServeStaysLiveUnderHostileScripts is the liveness test of the
// absolute-bounds work: while scripts that loop inside QuickJS's C
// built-ins keep both CPUs busy, `pml serve` answers other executions and
// /healthz in under a second and its garbage collector keeps running; the
// hostile scripts end at their deadline with TIMEOUT.
func TestServeStaysLiveUnderHostileScripts(t *testing.T) {
	sigURL, started := signalServer(t)
	// gctrace prints a line per garbage collection; a low GOGC makes the
	// answers below trigger several.
	srv := startServe(t, []string{"GODEBUG=gctrace=1", "GOGC=25"}, "--mcp", "sig="+sigURL)
	base, lines := srv.base, srv.lines

	hostile := []string{
		"return Array.prototype.includes.call({length: 2**53-1}, 1)",
		`return Array.prototype.join.call({length: 2**40}, "")`,
		"const a = new Uint8Array(6e7); for (;;) a.fill(1)",
	}
	const deadline = 6 * time.Second
	wait := startHostile(t, base, started, hostile, deadline)
	drain := func() (gcs int) {
		for {
			select {
			case l := <-lines:
				if strings.HasPrefix(l, "gc ") {
					gcs++
				}
			default:
				return gcs
			}
		}
	}
	drain()
	window := time.Now().Add(deadline - 2*time.Second)
	var slowest time.Duration
	answers := 0
	for time.Now().Before(window) {
		for _, path := range []string{"/execute", "/healthz"} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			var err error
			if path == "/execute" {
				var r map[string]any
				// Half a megabyte per answer keeps the collector busy.
				r, err = execute(ctx, base, "return 'x'.repeat(500000).length + 1", 5000)
				if err == nil && r["result"] != float64(500001) {
					err = fmt.Errorf("unexpected answer %v", r)
				}
			} else {
				var resp *http.Response
				req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
				if resp, err = http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			cancel()
			if err != nil {
				t.Fatalf("%s while hostile scripts ran: %v", path, err)
			}
			slowest = max(slowest, time.Since(start))
			answers++
		}
	}
	gcs := drain()
	t.Logf("while %d hostile scripts ran: %d answers, slowest %v, %d garbage collections", len(hostile), answers, slowest, gcs)
	if slowest > time.Second {
		t.Errorf("slowest answer took %v; want < 1s", slowest)
	}
	if gcs == 0 {
		t.Errorf("no garbage collection completed while the hostile scripts ran")
	}
	wait()
}

// startHostile runs each of codes in an execution of its own with
// deadline, once it has called mcp.sig.started, and returns when all have
// started; wait waits for them to end, each with TIMEOUT within a second
// of its deadline (generous for a loaded machine: before the check-ins,
// such scripts ran seconds past it).
func startHostile(t *testing.T, base string, started <-chan struct{}, codes []string, deadline time.Duration) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	for _, code := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			r, err := execute(ctx, base, "await mcp.sig.started({})\n"+code, int(deadline/time.Millisecond))
			if err != nil {
				t.Errorf("%s: %v", code, err)
				return
			}
			took := time.Since(start)
			t.Logf("%s: %v after %v", code, r["error"], took)
			if e, _ := r["error"].(map[string]any); e["code"] != "TIMEOUT" || took > deadline+time.Second {
				t.Errorf("%s: want TIMEOUT at its deadline, got %v after %v", code, r["error"], took)
			}
		}()
	}
	for range codes {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			wg.Wait()
			t.Fatal("the hostile scripts did not start")
		}
	}
	return wg.Wait
}

// TestRunStopsOnSIGTERM: `pml run` on a script stuck in a C built-in exits
// promptly when told to.
func TestRunStopsOnSIGTERM(t *testing.T) {
	cmd := exec.Command(bins.pml, "run", "--timeout", "60s", "--cache-dir", t.TempDir(), "-e", "return Array.prototype.indexOf.call({length: 2**53-1}, 1)")
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Whenever the signal lands (compiling, or deep in the loop), the
	// command must end within a second of it.
	time.Sleep(2 * time.Second)
	sent := time.Now()
	_ = cmd.Process.Signal(syscallTERM)
	select {
	case err := <-exited:
		t.Logf("exited %v after SIGTERM: %v %s", time.Since(sent), err, out.String())
		// Promptly: not at the script's 60 s deadline. The margin is for
		// a loaded 2-core machine.
		if time.Since(sent) > 5*time.Second {
			t.Errorf("pml run took %v to stop after SIGTERM", time.Since(sent))
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pml run ignored SIGTERM")
	}
}
