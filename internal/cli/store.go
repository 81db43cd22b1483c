package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/tracedb"
)

// storeFlags choose where traces go: a file shared by pml commands (the
// default), memory, or a DynamoDB table.
type storeFlags struct {
	store    string
	table    string
	endpoint string
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.store, "store", "file", "where traces are kept: file ("+tracedb.DefaultFilePath()+"), memory, or dynamodb")
	fs.StringVar(&f.table, "table", os.Getenv("PML_TRACES_TABLE"), "DynamoDB table for --store dynamodb")
	fs.StringVar(&f.endpoint, "endpoint", "", "DynamoDB endpoint (e.g. DynamoDB Local); the table is created there if missing")
}

func (f *storeFlags) open(ctx context.Context, log *slog.Logger) (tracedb.Store, error) {
	switch f.store {
	case "file":
		return tracedb.NewFile(tracedb.DefaultFilePath(), 0), nil
	case "memory":
		return tracedb.NewMemory(0), nil
	case "dynamodb":
	default:
		return nil, usagef("--store must be file, memory or dynamodb, not %q", f.store)
	}
	if f.table == "" {
		return nil, usagef("--store dynamodb needs --table (or PML_TRACES_TABLE)")
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	opts := []func(*dynamodb.Options){}
	if f.endpoint != "" {
		if cfg.Region == "" {
			cfg.Region = "us-east-1"
		}
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
			// A local endpoint accepts any credentials; never let the
			// default chain go looking for instance metadata.
			cfg.Credentials = credentials.NewStaticCredentialsProvider("local", "local", "")
		}
		opts = append(opts, func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(f.endpoint)
			o.DisableValidateResponseChecksum = true
		})
	}
	db := dynamodb.NewFromConfig(cfg, opts...)
	if f.endpoint != "" {
		if err := ensureTable(ctx, db, f.table); err != nil {
			return nil, err
		}
	}
	return tracedb.NewDynamo(db, f.table, 0, log), nil
}

func ensureTable(ctx context.Context, db *dynamodb.Client, table string) error {
	_, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return tracedb.CreateTable(ctx, db, table)
	}
	return err
}

func traceCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("trace", errOut)
	var sf storeFlags
	sf.register(fs)
	related := fs.String("related", "", "instead of an execution, list the tools used together with this server:tool")
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml trace [flags] EXECUTION_ID\n       pml trace [flags] --related server:tool\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	store, err := sf.open(ctx, logger(errOut))
	if err != nil {
		return ExitUsage, err
	}
	if *related != "" {
		rel, err := store.RelatedTools(ctx, *related, 20)
		if err != nil {
			return ExitFailed, err
		}
		return ExitOK, writeJSON(out, map[string]any{"tool": *related, "related": rel})
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return ExitUsage, usagef("give one execution id")
	}
	ex, calls, err := store.GetExecution(ctx, fs.Arg(0))
	if err != nil {
		return exitFor(err), fmt.Errorf("%w", err)
	}
	return ExitOK, writeJSON(out, map[string]any{"execution": ex, "calls": calls})
}
