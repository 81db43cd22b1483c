package app

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// OpenTraces opens the trace store cfg names, for commands that read
// traces without running anything (pml trace).
func OpenTraces(ctx context.Context, cfg TraceConfig, log *slog.Logger) (tracedb.Store, error) {
	var c awsConfig
	return c.openTraces(ctx, cfg, log)
}

// OpenRegistry opens the capability registry cfg names, for commands that
// manage capabilities without running anything (pml capability).
func OpenRegistry(ctx context.Context, cfg Config, log *slog.Logger) (capability.Registry, error) {
	var c awsConfig
	return c.openRegistry(ctx, cfg, log)
}

func (c *awsConfig) openTraces(ctx context.Context, cfg TraceConfig, log *slog.Logger) (tracedb.Store, error) {
	switch cfg.Store {
	case StoreMemory, "":
		return tracedb.NewMemory(cfg.Keep), nil
	case StoreFile:
		return tracedb.NewFile(cfg.File, cfg.Keep), nil
	case StoreDynamo:
	default:
		return nil, fault.New(fault.InvalidRequest, "trace store %q: want %s, %s or %s", cfg.Store, StoreMemory, StoreFile, StoreDynamo)
	}
	if cfg.Table == "" {
		return nil, fault.New(fault.InvalidRequest, "DynamoDB traces need a table")
	}
	db, err := c.dynamo(ctx, cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.Endpoint != "" {
		if err := ensureTable(ctx, db, cfg.Table); err != nil {
			return nil, err
		}
	}
	return tracedb.NewDynamo(db, cfg.Table, cfg.TTL, log), nil
}

// dynamo is a DynamoDB client, at endpoint (such as DynamoDB Local) when
// one is given.
func (c *awsConfig) dynamo(ctx context.Context, endpoint string) (*dynamodb.Client, error) {
	awsCfg, err := c.load(ctx)
	if err != nil {
		return nil, err
	}
	if endpoint == "" {
		return dynamodb.NewFromConfig(awsCfg), nil
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		// A local endpoint accepts any credentials; never let the
		// default chain go looking for instance metadata.
		awsCfg.Credentials = credentials.NewStaticCredentialsProvider("local", "local", "")
	}
	return dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.DisableValidateResponseChecksum = true
	}), nil
}

// ReindexCapabilities runs capability.DynamoRegistry.Reindex on table (at
// endpoint, when given): the one-off upgrade of a registry an earlier
// release wrote.
func ReindexCapabilities(ctx context.Context, table, endpoint string, progress func(capability.Reindexed)) (capability.Reindexed, error) {
	var c awsConfig
	db, err := c.dynamo(ctx, endpoint)
	if err != nil {
		return capability.Reindexed{}, err
	}
	return capability.NewDynamoRegistry(db, table).Reindex(ctx, progress)
}

// ensureTable creates a trace table that a local endpoint lacks.
func ensureTable(ctx context.Context, db *dynamodb.Client, table string) error {
	_, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return tracedb.CreateTable(ctx, db, table)
	}
	return err
}

// openRegistry picks the capability registry: DynamoDB when a table is
// named, else the file.
func (c *awsConfig) openRegistry(ctx context.Context, cfg Config, log *slog.Logger) (capability.Registry, error) {
	if cfg.CapabilitiesTable == "" {
		return capability.NewFileRegistry(cfg.CapabilitiesFile), nil
	}
	db, err := c.dynamo(ctx, "")
	if err != nil {
		return nil, err
	}
	log.Debug("capabilities in DynamoDB", "table", cfg.CapabilitiesTable)
	return capability.NewDynamoRegistry(db, cfg.CapabilitiesTable), nil
}

// openSuspensions opens the store of suspended executions cfg names: the
// DynamoDB table, else the directory, else none.
func (c *awsConfig) openSuspensions(ctx context.Context, cfg SuspensionConfig, log *slog.Logger) (suspend.Store, error) {
	opts := suspend.Options{TTL: cfg.TTL, Quota: cfg.SuspendedQuota}
	switch {
	case cfg.Table != "":
		db, err := c.dynamo(ctx, "")
		if err != nil {
			return nil, err
		}
		log.Debug("suspended executions in DynamoDB", "table", cfg.Table)
		return suspend.NewDynamo(db, cfg.Table, opts), nil
	case cfg.Dir != "":
		return suspend.NewFile(cfg.Dir, opts), nil
	}
	return nil, nil
}
