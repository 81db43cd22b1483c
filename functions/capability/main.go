// Command capability is the PML Sandbox capability function: it runs one
// stored capability in a fresh bridge and a fresh sandbox, invoked
// synchronously by the execute function (and by itself for nested
// capabilities). It only wires; see internal/app, internal/capability
// (the runner) and internal/lambdaevents (the handler).
package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
	"github.com/pml-sandbox/pml/internal/startgc"
)

func main() {
	// The collector idles through the start (internal/startgc).
	end := startgc.Begin()
	log := app.Logger(os.Stdout, slog.LevelInfo)
	if len(os.Args) > 1 {
		// `make build` runs `bootstrap --precompile DIR` to ship the
		// compiled guest in the artifact; Lambda passes no arguments.
		os.Exit(app.PrecompileMain(os.Args[1:], log))
	}
	start := time.Now()
	a, err := app.FromEnv(context.Background(), log)
	if err != nil {
		log.Error("init failed", "err", err)
		os.Exit(1)
	}
	// Initialised: the collector may run again.
	end()
	log.Info("init", "duration_ms", float64(time.Since(start).Microseconds())/1000, "guest", a.Engine.WasmHash())
	lambda.Start(lambdaevents.CapabilityHandler(a.CapabilityRunner(), a.Service, log))
}
