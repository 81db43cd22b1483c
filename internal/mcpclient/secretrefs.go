package mcpclient

// The exported forms of the secret references header values may hold
// (${env:NAME}, ${file:/absolute/path}), for the other tool sources
// (internal/openapisrc, internal/lambdasrc) that take credentials the same
// way: one syntax, one resolver.

// CheckSecretRefs reports a malformed secret reference in v (an empty
// name, a relative file path), without resolving anything.
func CheckSecretRefs(v string) error { return checkSecretRefs(v) }

// ResolveSecretRefs substitutes the secret references in v; what names v
// in errors, which never quote a value.
func ResolveSecretRefs(what, v string) (string, error) { return resolveRefs(what, v) }

// HasSecretRef reports whether v holds a secret reference (a value without
// one is itself the secret, and must be masked as written).
func HasSecretRef(v string) bool { return secretRef.MatchString(v) }

// HeaderSecrets is what a resolved header value makes secret: the value,
// and for "Scheme credentials" values the credentials alone.
func HeaderSecrets(v string) []string { return headerSecrets(v) }
