// Package lambdamain is what every Lambda function's main does around its
// own wiring: the logger, the arguments a build passes (Lambda passes
// none), ending the process when the wiring fails, and serving the
// handler. A main says only what is its own: Function.
//
// It links neither the service nor the sandbox (not internal/app), so the
// functions that run neither, aggregate and authorize, start the same way
// without the binary of the other two.
package lambdamain

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/pml-sandbox/pml/internal/logging"
)

// Function is one Lambda function's start, as its main wires it.
type Function struct {
	// Init wires the function and returns the handler to serve, in any
	// form lambda.Start accepts. An error ends the process with exit
	// status 1 and an "init failed" log line: Lambda reports the init
	// error and tries again with a fresh process. log is the function's
	// logger: JSON on standard output, which Lambda keeps in CloudWatch.
	Init func(ctx context.Context, log *slog.Logger) (handler any, err error)
	// Args, when set, runs a process given arguments instead and returns
	// its exit status: `make build` runs `bootstrap --precompile DIR`
	// (app.PrecompileMain) to ship the compiled guest in the artifact.
	// When nil, arguments are ignored: Lambda passes none.
	Args func(args []string, log *slog.Logger) int
	// Ready, when set, is called once Init has succeeded, before the
	// first event: the end of the start (startgc.Begin's function).
	Ready func()
}

// Run runs the function's process: it serves events until Lambda ends
// the process, or exits. It does not return.
func Run(f Function) {
	log := logging.New(os.Stdout, slog.LevelInfo)
	handler, code := start(context.Background(), f, os.Args[1:], log)
	if handler == nil {
		os.Exit(code)
	}
	lambda.Start(handler)
}

// start is Run up to serving: the handler, or, when there is none to
// serve, the exit status.
func start(ctx context.Context, f Function, args []string, log *slog.Logger) (handler any, code int) {
	if len(args) > 0 && f.Args != nil {
		return nil, f.Args(args, log)
	}
	handler, err := f.Init(ctx, log)
	if err == nil && handler == nil {
		err = errors.New("lambdamain: Init returned no handler")
	}
	if err != nil {
		log.Error("init failed", "err", err)
		return nil, 1
	}
	if f.Ready != nil {
		f.Ready()
	}
	return handler, 0
}
