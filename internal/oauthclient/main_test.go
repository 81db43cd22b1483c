package oauthclient

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// loopback redirect listener and the token traffic must all end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
