// Package octokit gives tests GitHub's REST API description
// (@octokit/openapi from npm, pinned; scripts/octokit.sh installs it into
// the cache): 1,200 operations and 13 MB of JSON, the large catalog of
// issue 43.
package octokit

import (
	"testing"

	"github.com/pml-sandbox/pml/internal/testutil/installer"
)

// Document is the path of api.github.com.json. When the document cannot
// be installed (npm missing or its registry unreachable) the test is
// skipped, saying so: it is the one fixture here that only npm has.
func Document(tb testing.TB) string {
	tb.Helper()
	path, err := installer.Run("octokit.sh")
	if err != nil {
		tb.Skipf("GitHub's OpenAPI document (@octokit/openapi) could not be installed from npm: %v", err)
	}
	return path
}
