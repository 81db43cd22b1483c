// Package prism starts Stoplight's Prism mock server (Node.js, from npm)
// for tests: a real HTTP service, which no one here wrote, answering an
// API as its OpenAPI document describes it (validating requests and
// security, answering with the document's examples). The documents come
// from @readme/oas-examples, a published collection installed beside it
// (scripts/prism.sh).
package prism

import (
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/testutil/installer"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
)

// Dir installs the fixtures once (scripts/prism.sh) and returns their
// directory. A missing npm fails the test: the suite never skips it
// silently.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, err := installer.Run("prism.sh")
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// Document is the path of a published document of @readme/oas-examples,
// such as "3.0/json/petstore.json".
func Document(tb testing.TB, name string) string {
	tb.Helper()
	return filepath.Join(Dir(tb), "node_modules", "@readme", "oas-examples", filepath.FromSlash(name))
}

// Server is a running Prism.
type Server struct {
	// URL is where it answers, without a trailing slash.
	URL  string
	out  *syncbuf.Buffer
	done chan struct{}
	cmd  *exec.Cmd
}

// Start serves the OpenAPI document at doc (a path) on a free loopback
// port until the test ends.
func Start(tb testing.TB, doc string) *Server {
	tb.Helper()
	dir := Dir(tb)
	port := freePort(tb)
	cmd := exec.Command(filepath.Join(dir, "bin", "node"), filepath.Join(dir, "node_modules", "@stoplight", "prism-cli", "dist", "index.js"),
		"mock", "--host", "127.0.0.1", "--port", strconv.Itoa(port), doc)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("prism: %v", err)
	}
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(port), out: out, done: make(chan struct{}), cmd: cmd}
	go func() { _ = cmd.Wait(); close(s.done) }()
	tb.Cleanup(s.stop)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "Prism is listening") {
		select {
		case <-s.done:
			tb.Fatalf("prism exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("prism did not listen: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// Requests counts the requests Prism has received.
func (s *Server) Requests() int { return strings.Count(s.out.String(), "Request received") }

// Log is everything Prism printed.
func (s *Server) Log() string { return s.out.String() }

func (s *Server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
