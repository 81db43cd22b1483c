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

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
	"github.com/pml-sandbox/pml/internal/lambdamain"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/startgc"
	_ "github.com/pml-sandbox/pml/internal/startgc/atinit"
)

func main() {
	// The collector idles through the start (internal/startgc).
	end := startgc.Begin()
	lambdamain.Run(lambdamain.Function{Init: wire, Args: app.PrecompileMain, Ready: end})
}

// wire builds the service the environment describes and the handler of
// every event the function takes.
func wire(ctx context.Context, log *slog.Logger) (any, error) {
	a, err := app.FunctionFromEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	textBytes, err := app.MCPTextBytes()
	if err != nil {
		return nil, err
	}
	// Asynchronous executions run in an asynchronous invocation of this
	// function.
	var launch runs.Launcher
	if a.Runs != nil {
		client, err := a.LambdaClient(ctx)
		if err != nil {
			return nil, err
		}
		launch = lambdaevents.InvokeSelf(client, os.Getenv(app.EnvLambdaFunction))
	}
	exec := a.Executor(nil, launch)
	h := a.HTTPHandler(httpapi.Options{Service: exec, Logger: log, MCP: mcpserver.Settings{TextBytes: textBytes}})
	return lambdaevents.Handler(lambdaevents.Options{HTTP: h, Service: exec, Runner: exec, Logger: log,
		Notified: a.AnnouncesSuspensions(), StreamREST: app.StreamREST()}), nil
}
