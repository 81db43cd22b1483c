// Package mcptest connects mcp-go clients for tests: started, initialized
// and closed when the test ends.
package mcptest

import (
	"context"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// Connect starts c and initializes it, asking for protocol version (empty:
// the newest the client negotiates), and closes it when the test ends.
func Connect(tb testing.TB, c *client.Client, version string) *client.Client {
	tb.Helper()
	tb.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = version
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Streamable connects a streamable HTTP client to url.
func Streamable(tb testing.TB, url, version string) *client.Client {
	tb.Helper()
	c, err := client.NewStreamableHttpClient(url)
	if err != nil {
		tb.Fatal(err)
	}
	return Connect(tb, c, version)
}
