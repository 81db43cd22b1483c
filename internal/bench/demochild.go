package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/demoserver"
)

// demoServer is the demo MCP server the harness's scripts call: in the
// benchmark's process (demoserver.Server) or in one of its own
// (childDemo).
type demoServer interface {
	SSEURL() string
	StreamableURL() string
	Close() error
}

// startDemo starts the demo MCP server: in the process demoCmd makes, or
// in this one when demoCmd is nil.
func startDemo(ctx context.Context, demoCmd func(context.Context) *exec.Cmd) (demoServer, error) {
	if demoCmd != nil {
		c, err := startChildDemo(ctx, demoCmd(ctx))
		if err != nil {
			return nil, err // not a nil *childDemo in the interface
		}
		return c, nil
	}
	s, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return s, nil
}

// childDemo is a demo MCP server in a process of its own.
type childDemo struct {
	cmd      *exec.Cmd
	sse, url string
	done     chan error
}

// The lines of `pml demo-server`'s greeting that name its endpoints start
// with these.
const (
	demoSSEPrefix = "SSE:"
	demoURLPrefix = "streamable HTTP:"
)

// startChildDemo starts cmd, a command that serves the demo MCP server
// and prints its greeting (as `pml demo-server --addr 127.0.0.1:0` does),
// and waits for the greeting's endpoints (SSE, then streamable HTTP).
func startChildDemo(ctx context.Context, cmd *exec.Cmd) (*childDemo, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: demo server: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: demo server: %w", err)
	}
	c := &childDemo{cmd: cmd, done: make(chan error, 1)}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if url, ok := strings.CutPrefix(line, demoSSEPrefix); ok {
				c.sse = strings.TrimSpace(url)
			}
			if url, ok := strings.CutPrefix(line, demoURLPrefix); ok {
				found <- strings.TrimSpace(url)
				break
			}
		}
		// Read the rest, so the child never blocks writing to its
		// standard output.
		_, _ = io.Copy(io.Discard, out)
		c.done <- cmd.Wait()
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case c.url = <-found:
		return c, nil
	case err := <-c.done:
		return nil, fmt.Errorf("bench: the demo server exited before it served: %v", err)
	case <-timer.C:
		err = errors.New("bench: the demo server did not say where it serves within 10s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = cmd.Process.Kill()
	<-c.done
	return nil, err
}

// SSEURL is the child's SSE endpoint ("" if its greeting named none).
func (c *childDemo) SSEURL() string { return c.sse }

// StreamableURL is the child's streamable HTTP endpoint.
func (c *childDemo) StreamableURL() string { return c.url }

// Close interrupts the child and waits for it (killing it after 5 s).
func (c *childDemo) Close() error {
	_ = c.cmd.Process.Signal(os.Interrupt)
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case <-c.done:
		return nil
	case <-timer.C:
		_ = c.cmd.Process.Kill()
		<-c.done
		return errors.New("bench: the demo server did not stop on interrupt; killed")
	}
}

// DemoServerCommand is the command of a demo MCP server in a process of
// its own: exe's `demo-server` on a free loopback port.
func DemoServerCommand(exe string) func(context.Context) *exec.Cmd {
	if exe == "" {
		return nil
	}
	return func(ctx context.Context) *exec.Cmd {
		return exec.CommandContext(ctx, exe, "demo-server", "--addr", "127.0.0.1:0")
	}
}
