package oauthclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// SecretsAPI is what SecretStore calls on AWS Secrets Manager, and so
// exactly what the template lets the functions do on their secrets
// (internal/samcheck pins the policy to these methods).
type SecretsAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
	PutSecretValue(ctx context.Context, in *secretsmanager.PutSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.PutSecretValueOutput, error)
}

// SecretStore keeps credentials in an AWS Secrets Manager secret, as a
// JSON document (the credentials file's). The version is the secret's
// AWSCURRENT version id.
//
// Save's version check needs no lock and no permission beyond
// PutSecretValue: the new version's ClientRequestToken is derived from the
// version it replaces. Secrets Manager refuses a second PutSecretValue with
// the same token and a different value (ResourceExistsException), so of two
// containers that refreshed from the same version only the first writes;
// the second is told (ErrConflict), reads the winner's tokens and uses
// them. A retry of the same write (same token, same value) is accepted, so
// the SDK's own retries are safe.
type SecretStore struct {
	API SecretsAPI
	ARN string
}

// Where returns the ARN.
func (s SecretStore) Where() string { return s.ARN }

// Load reads the secret's current value.
func (s SecretStore) Load(ctx context.Context) (*Credentials, string, error) {
	out, err := s.API.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(s.ARN)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		// Also what a secret created without a value answers.
		return nil, "", fmt.Errorf("%w in %s: %s", ErrNoCredentials, s.ARN, aws.ToString(nf.Message))
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading secret %s: %w", s.ARN, err)
	}
	var c Credentials
	if err := json.Unmarshal([]byte(aws.ToString(out.SecretString)), &c); err != nil {
		// Never quote the value: it is the secret.
		return nil, "", fmt.Errorf("secret %s does not hold a credentials document (JSON)", s.ARN)
	}
	return &c, aws.ToString(out.VersionId), nil
}

// Save writes c as a new version that replaces prev.
func (s SecretStore) Save(ctx context.Context, c *Credentials, prev string) (string, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	out, err := s.API.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId:           aws.String(s.ARN),
		SecretString:       aws.String(string(data)),
		ClientRequestToken: aws.String(requestToken(s.ARN, prev)),
	})
	var exists *types.ResourceExistsException
	if errors.As(err, &exists) {
		return "", ErrConflict
	}
	if err != nil {
		return "", fmt.Errorf("writing secret %s: %w", s.ARN, err)
	}
	return aws.ToString(out.VersionId), nil
}

// requestToken is the ClientRequestToken of the version that replaces
// prev: the same for every writer that read prev, shaped as a UUID
// (Secrets Manager wants 32 to 64 characters).
func requestToken(arn, prev string) string {
	sum := sha256.Sum256([]byte("pml-mcp-credentials\x00" + arn + "\x00" + prev))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
