package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/httpapi"
)

func serveCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("serve", errOut)
	var sf serviceFlags
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	noDemo := fs.Bool("no-demo-server", false, "do not start the built-in demo MCP server")
	sf.register(fs)
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	log := loggerAt(errOut, slog.LevelInfo)

	// The demo MCP server gives a first run something real to call: a
	// scratch key-value store, text tools and a clock, over loopback.
	if !*noDemo {
		ds, err := demoserver.Start("127.0.0.1:0")
		if err != nil {
			return ExitFailed, err
		}
		defer ds.Close()
		sf.mcp = append([]string{"demo=" + ds.StreamableURL()}, sf.mcp...)
	}
	w, err := sf.wire(ctx, log)
	if err != nil {
		return ExitUsage, err
	}
	defer w.close(context.Background())

	handler := httpapi.New(httpapi.Options{
		Service:      w.service,
		Traces:       w.traces,
		Capabilities: app.NewCapabilityAPI(w.registry),
		Health:       func() any { return map[string]any{"mcp_servers": w.health()} },
		Logger:       log,
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return ExitUsage, err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(errOut, `pml serve: listening on %s (Ctrl-C stops)

  curl -s %[1]s/execute -H 'Content-Type: application/json' -d '{"code":"await mcp.demo.kv_set({key:\"n\", value: 41}); const v = await mcp.demo.kv_get({key:\"n\"}); return v.value + 1"}'
  curl -s %[1]s/tools?format=dts
  curl -s %[1]s/executions/EXECUTION_ID
  MCP endpoint for agents: %[1]s/mcp   (claude mcp add --transport http pml %[1]s/mcp)
`, base)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return ExitFailed, err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return ExitFailed, err
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return ExitFailed, err
	}
	fmt.Fprintln(errOut, "pml serve: stopped")
	return ExitOK, nil
}
