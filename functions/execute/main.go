// Command execute is the PML Sandbox execute function: API Gateway (HTTP and
// REST APIs, including the /mcp endpoint and POST /executions/{id}/resume),
// SQS, EventBridge and direct invocations (an execute request, or
// {"resume": {...}} to continue a suspended execution), and its own
// asynchronous invocations ({"run": {...}}: an asynchronous execution) all
// enter here. It only wires; see internal/app,
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
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/startgc"
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
	// Initialised: the collector may run again (internal/startgc).
	startgc.Done()
	log.Info("init", "duration_ms", float64(time.Since(start).Microseconds())/1000, "guest", a.Engine.WasmHash())
	textBytes, err := app.MCPTextBytes()
	if err != nil {
		log.Error("init failed", "err", err)
		os.Exit(1)
	}
	// Asynchronous executions run in an asynchronous invocation of this
	// function.
	var launch runs.Launcher
	if a.Runs != nil {
		client, err := a.LambdaClient(context.Background())
		if err != nil {
			log.Error("init failed", "err", err)
			os.Exit(1)
		}
		launch = lambdaevents.InvokeSelf(client, os.Getenv(app.EnvLambdaFunction))
	}
	exec := a.Executor(nil, launch)
	h := a.HTTPHandler(httpapi.Options{Service: exec, Logger: log, MCP: mcpserver.Settings{TextBytes: textBytes}})
	lambda.Start(lambdaevents.Handler(lambdaevents.Options{HTTP: h, Service: exec, Runner: exec, Logger: log,
		Notified: a.AnnouncesSuspensions(), StreamREST: app.StreamREST()}))
}
