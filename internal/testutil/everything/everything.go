// Package everything starts the MCP reference server
// @modelcontextprotocol/server-everything (Node.js, from npm) for tests: a
// server we did not write, to prove our client speaks the protocol as
// others do.
package everything

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/testutil/installer"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
)

// Transport selects how the server is served.
type Transport string

// Transports server-everything offers over HTTP.
const (
	SSE        Transport = "sse"            // GET /sse + POST /message
	Streamable Transport = "streamableHttp" // /mcp
)

// Server is a running server-everything process.
type Server struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
	out  *syncbuf.Buffer
}

// Start installs (once, via scripts/server-everything.sh) and starts the
// server on a free loopback port; it is stopped when the test ends. A
// missing npm or node fails the test: the suite never skips it silently.
func Start(tb testing.TB, t Transport) *Server {
	tb.Helper()
	entry := install(tb)
	port := freePort(tb)
	cmd := exec.Command("node", entry, string(t))
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("server-everything: %v", err)
	}
	s := &Server{cmd: cmd, done: make(chan struct{}), out: out}
	go func() { _ = cmd.Wait(); close(s.done) }()
	tb.Cleanup(s.Stop)
	// Readiness by TCP: its POST /message without a session never answers,
	// so an HTTP probe would hang.
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-s.done:
			tb.Fatalf("server-everything exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("server-everything did not listen on %s: %s", addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if t == SSE {
		s.URL = "http://" + addr + "/sse"
	} else {
		s.URL = "http://" + addr + "/mcp"
	}
	return s
}

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

var (
	installOnce sync.Once
	entryPath   string
	installErr  error
)

func install(tb testing.TB) string {
	installOnce.Do(func() { entryPath, installErr = installer.Run("server-everything.sh") })
	if installErr != nil {
		tb.Fatalf("server-everything install: %v", installErr)
	}
	return entryPath
}

func freePort(tb testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
