//go:build !unix

package oauthclient

// lockFile does nothing where there is no flock: Save's version check
// still catches a conflict, only with a wider window.
func lockFile(string) (func(), error) { return func() {}, nil }
