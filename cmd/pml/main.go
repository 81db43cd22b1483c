// Command pml runs PML Sandbox locally: scripts (`pml run`), the local
// server (`pml serve`), the tool catalog (`pml tools`), traces
// (`pml trace`), capabilities (`pml capability`) and benchmarks
// (`pml bench`). See `pml help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pml-sandbox/pml/internal/cli"
	"github.com/pml-sandbox/pml/internal/startgc"
	_ "github.com/pml-sandbox/pml/internal/startgc/atinit"
)

func main() {
	// The collector idles until the command says its start is over
	// (internal/startgc; internal/cli ends it through the context).
	end := startgc.Begin()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(startgc.NewContext(ctx, end), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
