// Command aggregate is the PML Sandbox aggregator function: the traces
// table's stream (execution items only, by the event source mapping's
// filter) enters here, and the tool co-occurrence counters and the
// learning loop's are written one ADD per counter per batch, exactly once.
// It only wires; see internal/aggregate, tracedb.CoOccurrence and
// learn.Extract. It runs no sandbox: its artifact carries no guest.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pml-sandbox/pml/internal/aggregate"
	"github.com/pml-sandbox/pml/internal/lambdamain"
	"github.com/pml-sandbox/pml/internal/learn"
	"github.com/pml-sandbox/pml/internal/sdkhttp"
	"github.com/pml-sandbox/pml/internal/startgc"
	_ "github.com/pml-sandbox/pml/internal/startgc/atinit"
	"github.com/pml-sandbox/pml/internal/tracedb"
	"github.com/pml-sandbox/pml/internal/xraysink"
)

func main() {
	// The collector idles through the start (internal/startgc).
	end := startgc.Begin()
	lambdamain.Run(lambdamain.Function{Init: wire, Ready: end})
}

// wire builds the aggregator of the traces table named by
// PML_TRACES_TABLE.
func wire(ctx context.Context, log *slog.Logger) (any, error) {
	table := os.Getenv("PML_TRACES_TABLE")
	if table == "" {
		return nil, errors.New("PML_TRACES_TABLE is not set")
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	xraysink.InstrumentAWS(&cfg)
	sdkhttp.Use(&cfg)
	// One stream, two kinds of counters: tool co-occurrence and the
	// learning loop's candidates and capability runs.
	extract := aggregate.Extractors(tracedb.CoOccurrence, learn.Extract)
	opts := aggregate.Options{DB: dynamodb.NewFromConfig(cfg), Table: table, Extract: extract, Log: log}
	// DynamoDB Local (the integration tests) takes 10 actions a
	// transaction, DynamoDB 100.
	if v, err := strconv.Atoi(os.Getenv("PML_AGGREGATE_TRANSACT_ITEMS")); err == nil {
		opts.MaxTransactItems = v
	}
	agg, err := aggregate.New(opts)
	if err != nil {
		return nil, err
	}
	return agg.Handle, nil
}
