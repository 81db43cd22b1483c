// Package sdkhttp wraps the HTTP client of AWS SDK clients so that a
// request body the SDK has finished with cannot close the connection its
// response is still being read from.
//
// smithy-go closes a request's body as soon as the response headers are
// back, and its body wrapper then answers WriteTo with io.EOF. net/http,
// after writing a body of known length, makes one more copy from it to be
// sure it held no more bytes; when that copy runs after the close (the
// server was quick, the writing goroutine slow, as on a loaded machine),
// it takes the io.EOF for a failed write and closes the connection,
// under the reader of the response: "use of closed network connection"
// (aws/aws-sdk-go-v2#2737; the SDK retries that since #2949, which a
// response stream cannot be). Hiding WriteTo leaves the SDK's Read, which
// answers a closed body with a plain end of input, so the extra copy
// finds nothing and the connection lives.
package sdkhttp

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Client is an aws.HTTPClient whose requests' bodies offer only Read and
// Close to net/http.
type Client struct {
	base aws.HTTPClient
}

// New wraps base, or the SDK's default client when base is nil.
func New(base aws.HTTPClient) *Client {
	if base == nil {
		base = awshttp.NewBuildableClient()
	}
	return &Client{base: base}
}

// Use makes cfg's clients send through a Client.
func Use(cfg *aws.Config) {
	if _, done := cfg.HTTPClient.(*Client); !done {
		cfg.HTTPClient = New(cfg.HTTPClient)
	}
}

// Do sends r through the wrapped client.
func (c *Client) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = readCloser{r.Body}
	}
	return c.base.Do(r)
}

// readCloser hides every method of a body but Read and Close (WriteTo
// above all).
type readCloser struct{ rc io.ReadCloser }

func (b readCloser) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b readCloser) Close() error               { return b.rc.Close() }
