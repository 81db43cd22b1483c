package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/verifiedpermissions"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/policy/avp"
	"github.com/pml-sandbox/pml/internal/policy/source"
	"github.com/pml-sandbox/pml/internal/policy/usage"
	"github.com/pml-sandbox/pml/internal/ssmparam"
)

// The policy set's settings (docs/POLICY.md).
const (
	EnvPolicy         = "PML_POLICY"           // the policy set: a file, s3://bucket/key or ssm:/name (default: generated from the switches); CLI: --policy's default
	EnvPolicyReload   = "PML_POLICY_RELOAD"    // how often the source is looked at for a new version, a Go duration (default 60s)
	EnvPolicyAVPStore = "PML_POLICY_AVP_STORE" // a Verified Permissions policy store that decides instead of the set in process
	EnvLimitsTable    = "PML_LIMITS_TABLE"     // the DynamoDB table limits are counted in (default the suspensions table)
	EnvLimitsDir      = "PML_LIMITS_DIR"       // the directory limits are counted in locally (default limits/ beside the suspensions)
)

// PolicyConfig says which policy set decides, and where its limits are
// counted.
type PolicyConfig struct {
	// Source names the policy set: a file, s3://bucket/key or ssm:/name.
	// Empty: the default set, generated from the approval switches.
	Source string
	// Reload is how often Source is looked at for a new version (zero:
	// source.DefaultEvery).
	Reload time.Duration
	// AVPStore, when set, is the Verified Permissions policy store that
	// decides (IsAuthorized) instead of a set in process.
	AVPStore string
	// LimitsTable and LimitsDir are where limits are counted: a DynamoDB
	// table, else a directory; neither: beside the suspensions (their
	// table, or limits/ in their directory).
	LimitsTable string
	LimitsDir   string
}

// PolicyFromEnv reads PML_POLICY, PML_POLICY_RELOAD,
// PML_POLICY_AVP_STORE, PML_LIMITS_TABLE and PML_LIMITS_DIR.
func PolicyFromEnv() (PolicyConfig, error) {
	pc := PolicyConfig{Source: strings.TrimSpace(os.Getenv(EnvPolicy)), AVPStore: strings.TrimSpace(os.Getenv(EnvPolicyAVPStore)),
		LimitsTable: os.Getenv(EnvLimitsTable), LimitsDir: os.Getenv(EnvLimitsDir)}
	if v := os.Getenv(EnvPolicyReload); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return PolicyConfig{}, fault.New(fault.InvalidRequest, "%s must be a duration of at least 1s, such as 60s, not %q", EnvPolicyReload, v)
		}
		pc.Reload = d
	}
	return pc, nil
}

// openPolicy returns cfg's approval policy with its rules set, and where
// its limits are counted (openCounter).
func (a *App) openPolicy(ctx context.Context, cfg Config, log *slog.Logger) (approval.Policy, policy.Counter, error) {
	p, err := a.openRules(ctx, cfg.Policy, cfg.Approval.Policy, log)
	if err != nil {
		return p, nil, err
	}
	counter, err := a.aws.openCounter(ctx, cfg.Policy, cfg.Suspensions)
	return p, counter, err
}

// LoadPolicy returns p with the rules cfg names set, as an App does, for
// commands that decide without running anything (pml capability).
func LoadPolicy(ctx context.Context, cfg PolicyConfig, p approval.Policy, log *slog.Logger) (approval.Policy, error) {
	return (&App{}).openRules(ctx, cfg, p, log)
}

// openRules sets p's rules: Verified Permissions, the set cfg names
// (watched for new versions), else the default set generated from p's
// switches. A set that cannot be loaded fails the start: a service never
// runs under a policy other than the one its operator named.
func (a *App) openRules(ctx context.Context, cfg PolicyConfig, p approval.Policy, log *slog.Logger) (approval.Policy, error) {
	switch {
	case cfg.AVPStore != "":
		awsCfg, err := a.aws.load(ctx)
		if err != nil {
			return p, err
		}
		p.Rules, p.Custom = &avp.Authorizer{API: verifiedpermissions.NewFromConfig(awsCfg), PolicyStoreID: cfg.AVPStore}, true
		log.Info("policy set", "source", "avp:"+cfg.AVPStore)
		return p, nil
	case cfg.Source != "":
		f, err := source.Open(ctx, cfg.Source, a.policyClients())
		if err != nil {
			return p, fault.Wrap(fault.InvalidRequest, err, EnvPolicy)
		}
		w, err := source.Watch(ctx, f, cfg.Reload, log)
		if err != nil {
			return p, fault.Wrap(fault.InvalidRequest, err, "")
		}
		a.closers = append(a.closers, func(context.Context) error { w.Close(); return nil })
		p.Rules, p.Custom = w, true
		log.Info("policy set", "source", cfg.Source, "digest", w.Set().Digest(), "policies", w.Set().Len())
		return p, nil
	}
	p.Rules = nil
	return p.Compile()
}

// policyClients make the S3 and SSM clients a policy source reads with.
func (a *App) policyClients() source.Clients {
	return source.Clients{
		S3: func(ctx context.Context) (source.S3API, error) {
			cfg, err := a.aws.load(ctx)
			if err != nil {
				return nil, err
			}
			// An endpoint of one's own (a stand-in, MinIO) is addressed
			// by path.
			pathStyle := os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
			return s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = pathStyle }), nil
		},
		SSM: func(ctx context.Context) (source.SSMAPI, error) {
			cfg, err := a.aws.load(ctx)
			if err != nil {
				return nil, err
			}
			return ssmparam.Client{Config: cfg}, nil
		},
	}
}

// openCounter opens where limits are counted: the table or directory cfg
// names, else beside the suspensions; nil where there is neither (a call
// a limit applies to is then refused).
func (c *awsConfig) openCounter(ctx context.Context, cfg PolicyConfig, susp SuspensionConfig) (policy.Counter, error) {
	table, dir := cfg.LimitsTable, cfg.LimitsDir
	if table == "" && dir == "" {
		table = susp.Table
		if table == "" && susp.Dir != "" {
			dir = LimitsDir(susp.Dir)
		}
	}
	switch {
	case table != "":
		db, err := c.dynamo(ctx, "")
		if err != nil {
			return nil, err
		}
		return usage.NewDynamo(db, table), nil
	case dir != "":
		d, err := usage.NewDir(dir)
		if err != nil {
			return nil, fmt.Errorf("limits: %w", err)
		}
		return d, nil
	}
	return nil, nil
}

// LimitsDir is where the directory store counts limits, beside the
// suspensions in dir.
func LimitsDir(dir string) string { return filepath.Join(dir, "limits") }
