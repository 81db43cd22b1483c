// Package usage counts what a policy set's limits bound (internal/policy:
// @limit, @sum), where every process of a deployment sees the same count:
// a DynamoDB item per key deployed (Dynamo), a file per key in a directory
// under a file lock locally (Dir). Each Add is one atomic step: the count
// grows only while it stays within its limit, so two containers counting
// against one limit never let it pass.
package usage

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/pml-sandbox/pml/internal/policy"
)

// keyHash is a count key's fixed-length name: what it counts can be long
// (a principal is up to a few hundred characters) and is kept in the
// record beside it, for reading.
func keyHash(k policy.CountKey) string {
	sum := sha256.Sum256([]byte(k.String()))
	return hex.EncodeToString(sum[:16])
}

// record is what is kept of one count.
type record struct {
	Count     int64  `json:"count" dynamodbav:"n"`
	Policy    string `json:"policy" dynamodbav:"policy"`
	Measure   string `json:"measure" dynamodbav:"measure"`
	Principal string `json:"principal" dynamodbav:"principal"`
	Tool      string `json:"tool" dynamodbav:"tool"`
	Window    int64  `json:"window" dynamodbav:"window"`
	// Expires is when the count may be forgotten (Unix seconds).
	Expires int64 `json:"expires" dynamodbav:"ttl"`
}
