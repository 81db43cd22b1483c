package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
)

// mount is the MCP server opts configure at /mcp, as httpapi mounts it,
// and the approval page's routes where there is a page; the server is
// closed when the test ends.
func mount(t *testing.T, opts mcpserver.Options) http.Handler {
	t.Helper()
	s := mcpserver.New(opts)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	mux := http.NewServeMux()
	mux.Handle("/mcp", s)
	if opts.Approvals != nil {
		for _, k := range approvalpage.RouteKeys {
			mux.Handle(k, opts.Approvals)
		}
	}
	return mux
}

// serve serves mount(opts), each request from the principal its
// fronttest.PrincipalHeader names, else from def.
func serve(t *testing.T, opts mcpserver.Options, def string) *httptest.Server {
	t.Helper()
	return fronttest.ServeAs(t, mount(t, opts), def)
}

// engine is the one engine every test's service runs on (enginetest).
var engine *guest.Engine

func TestMain(m *testing.M) {
	enginetest.Main(m, func(e *guest.Engine) { engine = e })
}
