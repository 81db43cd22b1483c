// Command capability is the PML Sandbox capability function: it runs one
// stored capability in a fresh executor and a fresh sandbox, invoked
// synchronously by the execute function (and by itself for nested
// capabilities). It only wires; see internal/app, internal/capability
// (the runner) and internal/lambdaevents (the handler).
package main

import (
	"context"
	"log/slog"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
	"github.com/pml-sandbox/pml/internal/lambdamain"
	"github.com/pml-sandbox/pml/internal/startgc"
	_ "github.com/pml-sandbox/pml/internal/startgc/atinit"
)

func main() {
	// The collector idles through the start (internal/startgc).
	end := startgc.Begin()
	lambdamain.Run(lambdamain.Function{Init: wire, Args: app.PrecompileMain, Ready: end})
}

// wire builds the service the environment describes and the handler
// that runs one capability in it.
func wire(ctx context.Context, log *slog.Logger) (any, error) {
	a, err := app.FunctionFromEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	return lambdaevents.CapabilityHandler(a.CapabilityRunner(), a.Service, log), nil
}
