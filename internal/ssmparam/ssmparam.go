// Package ssmparam reads one SSM parameter (GetParameter, decrypted): the
// server list a function reads at its start.
//
// It signs one JSON request with the AWS SDK's own SigV4 signer and
// credentials rather than linking the SDK's SSM client: that client's
// generated package brings ~1,400 operation and shape schemas that are
// built at package initialisation, ~2 ms of every cold start (docs/
// BENCHMARKS.md, "Package initialisation"), for the one call made here.
package ssmparam

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// maxBody bounds what is read of an answer: a parameter's value is at most
// 8 KB (advanced tier), with its JSON around it.
const maxBody = 1 << 20

// attempts is how many times a throttled or failed request is tried.
const attempts = 3

// Error is SSM's refusal: its error type (ParameterNotFound,
// AccessDeniedException, …) and message.
type Error struct {
	Status  int
	Type    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("ssm: %s (HTTP %d): %s", e.Type, e.Status, e.Message)
}

// Parameter is a parameter's decrypted value and its version.
type Parameter struct {
	Value   string
	Version int64
}

// Client reads parameters with Config's region, credentials and HTTP
// client.
type Client struct{ Config aws.Config }

// GetParameter returns the parameter name, decrypted.
func (c Client) GetParameter(ctx context.Context, name string) (Parameter, error) {
	return GetParameter(ctx, c.Config, name)
}

// Get returns the decrypted value of the parameter name, with cfg's region,
// credentials and HTTP client.
func Get(ctx context.Context, cfg aws.Config, name string) (string, error) {
	p, err := GetParameter(ctx, cfg, name)
	return p.Value, err
}

// GetParameter returns the parameter name, decrypted, and its version, with
// cfg's region, credentials and HTTP client.
func GetParameter(ctx context.Context, cfg aws.Config, name string) (Parameter, error) {
	if cfg.Credentials == nil {
		return Parameter{}, fmt.Errorf("ssm: no AWS credentials")
	}
	endpoint, err := Endpoint(cfg)
	if err != nil {
		return Parameter{}, err
	}
	body, _ := json.Marshal(map[string]any{"Name": name, "WithDecryption": true})
	var last error
	for i := range attempts {
		if i > 0 {
			select {
			case <-time.After(time.Duration(100<<i) * time.Millisecond):
			case <-ctx.Done():
				return Parameter{}, ctx.Err()
			}
		}
		p, retry, err := get(ctx, cfg, endpoint, body)
		if err == nil || !retry {
			return p, err
		}
		last = err
	}
	return Parameter{}, last
}

// get makes one attempt; retry says whether another may succeed.
func get(ctx context.Context, cfg aws.Config, endpoint string, body []byte) (p Parameter, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/", bytes.NewReader(body))
	if err != nil {
		return p, false, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "AmazonSSM.GetParameter")
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return p, false, fmt.Errorf("ssm: credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "ssm", cfg.Region, time.Now()); err != nil {
		return p, false, err
	}
	client := cfg.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return p, ctx.Err() == nil, fmt.Errorf("ssm: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return p, true, fmt.Errorf("ssm: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Type     string `json:"__type"`
			Message  string `json:"message"`
			Message2 string `json:"Message"`
		}
		_ = json.Unmarshal(b, &e)
		// "__type" may carry a namespace: "com.amazonaws.ssm#ParameterNotFound".
		typ := e.Type[strings.LastIndex(e.Type, "#")+1:]
		msg := e.Message + e.Message2
		retry := resp.StatusCode >= 500 || resp.StatusCode == 429 || strings.Contains(typ, "Throttl")
		return p, retry, &Error{Status: resp.StatusCode, Type: typ, Message: msg}
	}
	var out struct {
		Parameter *struct {
			Value   *string `json:"Value"`
			Version int64   `json:"Version"`
		} `json:"Parameter"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Parameter == nil || out.Parameter.Value == nil {
		return p, false, fmt.Errorf("ssm: an answer without the parameter's value")
	}
	return Parameter{Value: *out.Parameter.Value, Version: out.Parameter.Version}, false, nil
}

// Endpoint is where SSM is asked: AWS_ENDPOINT_URL_SSM, else the
// configuration's base endpoint (AWS_ENDPOINT_URL), else the region's
// (FIPS when AWS_USE_FIPS_ENDPOINT=true), as the SDK resolves them.
func Endpoint(cfg aws.Config) (string, error) {
	if v := os.Getenv("AWS_ENDPOINT_URL_SSM"); v != "" {
		return strings.TrimSuffix(v, "/"), nil
	}
	if cfg.BaseEndpoint != nil && *cfg.BaseEndpoint != "" {
		return strings.TrimSuffix(*cfg.BaseEndpoint, "/"), nil
	}
	if cfg.Region == "" {
		return "", fmt.Errorf("ssm: no AWS region")
	}
	suffix := "amazonaws.com"
	switch {
	case strings.HasPrefix(cfg.Region, "cn-"):
		suffix = "amazonaws.com.cn"
	case strings.HasPrefix(cfg.Region, "eusc-"):
		suffix = "amazonaws.eu"
	}
	host := "ssm"
	if strings.EqualFold(os.Getenv("AWS_USE_FIPS_ENDPOINT"), "true") {
		host = "ssm-fips"
	}
	return "https://" + host + "." + cfg.Region + "." + suffix, nil
}
