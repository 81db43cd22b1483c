package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"testing"

	"github.com/pml-sandbox/pml/internal/demoserver"
)

// demoChildEnv makes the test binary a demo MCP server (testDemoCommand),
// as `pml demo-server` is for pml bench.
const demoChildEnv = "PML_BENCH_DEMO_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(demoChildEnv) == "1" {
		os.Exit(serveDemoChild())
	}
	os.Exit(m.Run())
}

// serveDemoChild serves the demo MCP server on a free loopback port and
// says where, as `pml demo-server` does, until interrupted.
func serveDemoChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("demo MCP server\n  %s %s\n  %s %s\n", demoSSEPrefix, s.SSEURL(), demoURLPrefix, s.StreamableURL())
	<-ctx.Done()
	if err := s.Close(); err != nil {
		return 1
	}
	return 0
}

// testDemoCommand is DemoServerCommand for the test binary.
func testDemoCommand(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), demoChildEnv+"=1")
	return cmd
}
