// Command execute is the PML Sandbox execute function: API Gateway (HTTP and
// REST APIs, including the /mcp endpoint and POST /executions/{id}/resume),
// SQS, EventBridge and direct invocations (an execute request, or
// {"resume": {...}} to continue a suspended execution) all enter here. It only wires; see internal/app,
// internal/httpapi and internal/lambdaevents.
package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
)

func main() {
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
	log.Info("init", "duration_ms", float64(time.Since(start).Microseconds())/1000, "guest", a.Engine.WasmHash())
	textBytes, err := app.MCPTextBytes()
	if err != nil {
		log.Error("init failed", "err", err)
		os.Exit(1)
	}
	h := a.HTTPHandler(httpapi.Options{Logger: log, MCPTextBytes: textBytes})
	lambda.Start(lambdaevents.Handler(lambdaevents.Options{HTTP: h, Service: a.Service, Logger: log, Notified: a.AnnouncesSuspensions()}))
}
