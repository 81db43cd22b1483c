package mcpclient

import (
	"github.com/pml-sandbox/pml/internal/secretref"
)

// Secret references in credentials (${env:NAME}, ${file:/path},
// ${secret:ARN-or-name[#key]}) are internal/secretref's, shared with the
// other tool sources (internal/toolsource): one syntax, one resolver per
// process (WithSecretRefs).

// WithSecretRefs sets the resolver of the servers' secret references,
// shared with the process's other tool sources so that a Secrets Manager
// secret is read once per process and lifetime. Without it the pool makes
// its own, reading Secrets Manager through WithSecretsManager's client.
func WithSecretRefs(r *secretref.Resolver) Option {
	return func(o *options) { o.refs = r }
}
