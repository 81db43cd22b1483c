// Package source loads a deployment's policy set from where the operator
// keeps it — a file (in the artifact, or beside pml), an S3 object
// (s3://bucket/key) or an SSM parameter (ssm:/name) — and keeps it
// current: a Watcher checks the source for a new version at most every so
// often (an S3 ETag, an SSM parameter version, a file's digest), and
// swaps the new set in only once it has loaded and validated whole. A new
// version that fails keeps the old set in force, and is logged.
package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/ssmparam"
)

// Fetcher reads a policy set's text from its source.
type Fetcher interface {
	// Fetch returns the text and its version, or unchanged when the
	// source still holds version since (which it need not read again).
	Fetch(ctx context.Context, since string) (text []byte, version string, unchanged bool, err error)
	// Name is the source as the operator wrote it (messages, traces).
	Name() string
}

// S3API is the part of the S3 client a Fetcher uses.
type S3API interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// SSMAPI reads one SSM parameter, decrypted, with its version
// (ssmparam.Client: the SDK's generated SSM client builds ~1,400 schemas
// at package initialisation, ~2 ms of every start, for this one call).
type SSMAPI interface {
	GetParameter(ctx context.Context, name string) (ssmparam.Parameter, error)
}

// Clients make the AWS clients a source needs, only when it needs one.
type Clients struct {
	S3  func(context.Context) (S3API, error)
	SSM func(context.Context) (SSMAPI, error)
}

// Open returns the Fetcher spec names: "s3://bucket/key", "ssm:/name"
// (or "ssm:name"), else a file path.
func Open(ctx context.Context, spec string, c Clients) (Fetcher, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return nil, errors.New("no policy source named")
	case strings.HasPrefix(spec, "s3://"):
		bucket, key, ok := strings.Cut(strings.TrimPrefix(spec, "s3://"), "/")
		if !ok || bucket == "" || key == "" {
			return nil, fmt.Errorf("%q: an S3 source is s3://<bucket>/<key>", spec)
		}
		if c.S3 == nil {
			return nil, fmt.Errorf("%q: S3 is not available here", spec)
		}
		api, err := c.S3(ctx)
		if err != nil {
			return nil, err
		}
		return &s3Fetcher{api: api, bucket: bucket, key: key, name: spec}, nil
	case strings.HasPrefix(spec, "ssm:"):
		name := strings.TrimPrefix(spec, "ssm:")
		if name == "" {
			return nil, fmt.Errorf("%q: an SSM source is ssm:<parameter name>", spec)
		}
		if c.SSM == nil {
			return nil, fmt.Errorf("%q: SSM is not available here", spec)
		}
		api, err := c.SSM(ctx)
		if err != nil {
			return nil, err
		}
		return &ssmFetcher{api: api, param: name, name: spec}, nil
	}
	return File(spec), nil
}

// File is a Fetcher of a file; its version is its content's digest.
func File(path string) Fetcher { return fileFetcher(path) }

type fileFetcher string

// Name implements Fetcher: the path.
func (f fileFetcher) Name() string { return string(f) }

// Fetch implements Fetcher: the file read whole (within the set's
// bound), its version its digest.
func (f fileFetcher) Fetch(_ context.Context, since string) ([]byte, string, bool, error) {
	b, err := readBounded(string(f))
	if err != nil {
		return nil, "", false, err
	}
	sum := sha256.Sum256(b)
	v := hex.EncodeToString(sum[:])
	return b, v, v == since, nil
}

// readBounded reads a file of at most policy.MaxBytes (and one more, to
// tell a longer one).
func readBounded(path string) ([]byte, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	return io.ReadAll(io.LimitReader(fd, policy.MaxBytes+1))
}

type s3Fetcher struct {
	api         S3API
	bucket, key string
	name        string
}

// Name implements Fetcher: s3://bucket/key.
func (f *s3Fetcher) Name() string { return f.name }

// Fetch reads the object unless its ETag is still since (a conditional
// GET: 304 Not Modified reads nothing).
func (f *s3Fetcher) Fetch(ctx context.Context, since string) ([]byte, string, bool, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(f.key)}
	if since != "" {
		in.IfNoneMatch = aws.String(since)
	}
	out, err := f.api.GetObject(ctx, in)
	var re *awshttp.ResponseError
	switch {
	case errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotModified:
		return nil, since, true, nil
	case err != nil:
		return nil, "", false, fmt.Errorf("%s: %w", f.name, err)
	}
	defer out.Body.Close()
	etag := aws.ToString(out.ETag)
	if etag != "" && etag == since {
		return nil, since, true, nil
	}
	b, err := io.ReadAll(io.LimitReader(out.Body, policy.MaxBytes+1))
	if err != nil {
		return nil, "", false, fmt.Errorf("%s: %w", f.name, err)
	}
	return b, etag, false, nil
}

type ssmFetcher struct {
	api   SSMAPI
	param string
	name  string
}

// Name implements Fetcher: ssm:name.
func (f *ssmFetcher) Name() string { return f.name }

// Fetch reads the parameter (decrypted, for a SecureString); its version
// is the parameter's.
func (f *ssmFetcher) Fetch(ctx context.Context, since string) ([]byte, string, bool, error) {
	out, err := f.api.GetParameter(ctx, f.param)
	if err != nil {
		return nil, "", false, fmt.Errorf("%s: %w", f.name, err)
	}
	v := fmt.Sprint(out.Version)
	if v == since {
		return nil, since, true, nil
	}
	return []byte(out.Value), v, false, nil
}
