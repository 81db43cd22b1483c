package source_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/policy/source"
	"github.com/pml-sandbox/pml/internal/ssmparam"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	v1  = `@id("reads") permit (principal, action == PML::Action::"call", resource == PML::Tool::"pets:getPetById");`
	v2  = `@id("reads-and-lists") permit (principal, action == PML::Action::"call", resource in PML::Server::"pets") when { resource.readOnly };`
	bad = `@id("typo") permit (principal, action == PML::Action::"call", resource) when { resource.readOnyl };`
)

// ids are the ids of the set's policies, as one string.
func ids(s *policy.Set) string {
	d, _ := s.Authorize(context.Background(), mustCall())
	return strings.Join(d.Policies, ",")
}

func mustCall() policy.Input {
	yes := true
	in, _ := policy.CallInput(policy.Call{Principal: "jwt:https://idp#a", Tool: toolGet(yes)}, false)
	return in
}

// TestReload: a source that changes is reloaded; a version that does not
// validate keeps the one in force.
func TestReload(t *testing.T) {
	m := moto.Start(t)
	ctx := context.Background()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", "")}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(m.Endpoint), true })
	ssmc := ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.BaseEndpoint = aws.String(m.Endpoint) })
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("policies")}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.cedar")
	clients := source.Clients{
		S3: func(context.Context) (source.S3API, error) { return s3c, nil },
		SSM: func(context.Context) (source.SSMAPI, error) {
			c := cfg
			c.BaseEndpoint = aws.String(m.Endpoint)
			return ssmparam.Client{Config: c}, nil
		},
	}
	for _, tc := range []struct {
		spec  string
		write func(text string)
	}{
		{path, func(text string) {
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"s3://policies/prod/policy.cedar", func(text string) {
			if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("policies"), Key: aws.String("prod/policy.cedar"), Body: strings.NewReader(text)}); err != nil {
				t.Fatal(err)
			}
		}},
		{"ssm:/pml/policy", func(text string) {
			if _, err := ssmc.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String("/pml/policy"), Value: aws.String(text),
				Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			tc.write(bad)
			f, err := source.Open(ctx, tc.spec, clients)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := source.Watch(ctx, f, time.Hour, nil); err == nil || !strings.Contains(err.Error(), "readOnyl") {
				t.Fatalf("a set that does not validate was loaded at start: %v", err)
			}
			tc.write(v1)
			w, err := source.Watch(ctx, f, time.Hour, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if got := ids(w.Set()); got != "reads" {
				t.Fatalf("first version: %q", got)
			}
			if s, err := w.Refresh(ctx); s != nil || err != nil {
				t.Fatalf("an unchanged source reloaded: %v %v", s, err)
			}
			tc.write(bad)
			if _, err := w.Refresh(ctx); err == nil {
				t.Fatal("a bad version loaded")
			}
			if got := ids(w.Set()); got != "reads" {
				t.Fatalf("after a bad version: %q; the good one must stay in force", got)
			}
			tc.write(v2)
			if s, err := w.Refresh(ctx); s == nil || err != nil {
				t.Fatalf("the new version: %v %v", s, err)
			}
			if got := ids(w.Set()); got != "reads-and-lists" {
				t.Fatalf("second version: %q", got)
			}
			if !strings.HasPrefix(w.Set().Origin(), tc.spec) {
				t.Errorf("origin %q", w.Set().Origin())
			}
		})
	}
}

// TestReloadOnUse: a Watcher in use looks at its source once its period
// has passed, in the background, and the new set is in force after.
func TestReloadOnUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.cedar")
	_ = os.WriteFile(path, []byte(v1), 0o600)
	w, err := source.Watch(context.Background(), source.File(path), 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_ = os.WriteFile(path, []byte(v2), 0o600)
	deadline := time.Now().Add(10 * time.Second)
	for ids(w.Set()) != "reads-and-lists" {
		if time.Now().After(deadline) {
			t.Fatal("never reloaded")
		}
		_, _ = w.Authorize(context.Background(), mustCall())
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, spec := range []string{"", "s3://bucket", "s3:///key", "ssm:"} {
		if _, err := source.Open(context.Background(), spec, source.Clients{}); err == nil {
			t.Errorf("%q: opened", spec)
		}
	}
}
