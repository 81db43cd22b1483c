package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// openRuns opens the store of asynchronous executions' runs beside the
// suspensions cfg names: the same DynamoDB table (partition RUN#<id>), or
// the directory's runs/; none without either, and async is then refused.
func (c *awsConfig) openRuns(ctx context.Context, cfg SuspensionConfig) (suspend.Runs, error) {
	opts := suspend.Options{TTL: cfg.TTL}
	switch {
	case cfg.Table != "":
		db, err := c.dynamo(ctx, "")
		if err != nil {
			return nil, err
		}
		return suspend.NewDynamoRuns(db, cfg.Table, opts), nil
	case cfg.Dir != "":
		return suspend.NewFileRuns(filepath.Join(cfg.Dir, "runs"), opts), nil
	}
	return nil, nil
}

// Executor is what every front end of this app runs executions through:
// inner (nil: the app's service; pml serve passes it admitted within its
// budget) with the app's runs, so asynchronous requests are recorded and
// launched by launch (nil: on a goroutine of this process), and their
// documents read and cancelled. Close it after the front end stops.
func (a *App) Executor(inner execution.Executor, launch runs.Launcher) *runs.Service {
	if inner == nil {
		inner = a.Service
	}
	opts := runs.Options{Store: a.Runs, Launch: launch, Policy: a.policy, Logger: a.log}
	if a.Journal != nil {
		opts.Journal = a.Journal
	}
	if d, err := durationEnv(EnvRunLease); err != nil {
		a.log.Warn("the run lease is the default", "err", err)
	} else {
		opts.Lease = d
	}
	return runs.New(inner, opts)
}

// SweepEvery is how often pml serve looks for runs whose runner died
// (PML_SWEEP_EVERY; 0: runs.DefaultSweepEvery).
func SweepEvery() (time.Duration, error) { return durationEnv(EnvSweepEvery) }

// durationEnv reads a positive Go duration from the environment (0 when
// unset).
func durationEnv(name string) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s must be a positive Go duration such as 30s, not %q", name, v)
	}
	return d, nil
}

// LambdaClient is a Lambda client with the app's AWS configuration (the
// execute function invokes itself to run asynchronous executions).
func (a *App) LambdaClient(ctx context.Context) (*lambda.Client, error) {
	cfg, err := a.aws.load(ctx)
	if err != nil {
		return nil, err
	}
	return lambda.NewFromConfig(cfg), nil
}

// StreamREST reports whether PML_STREAM_REST_API asks for REST API events
// to be answered as streamed responses.
func StreamREST() bool { return strings.EqualFold(os.Getenv(EnvStreamREST), "on") }
