package sdkhttp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/pml-sandbox/pml/internal/sdkhttp"
)

// sdkBody behaves as smithy-go's request body wrapper does, with the
// race made certain: net/http's copy of the whole body goes through Read;
// its last, length-checking copy goes through WriteTo, which here waits
// until the caller closes the body (as smithy-go does once the response
// headers are in) and then answers io.EOF, as smithy-go's does.
type sdkBody struct {
	r      *bytes.Reader
	once   sync.Once
	closed chan struct{}
}

func (b *sdkBody) Read(p []byte) (int, error) {
	select {
	case <-b.closed:
		return 0, io.EOF
	default:
		return b.r.Read(p)
	}
}

func (b *sdkBody) WriteTo(io.Writer) (int64, error) {
	<-b.closed
	return 0, io.EOF
}

func (b *sdkBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// TestClosedBodyKeepsTheConnection: a request body closed while net/http
// still holds it must not fail the request's write (which closes the
// connection under the response). The SDK's own client shows the failure,
// so the test can tell the two apart.
func TestClosedBodyKeepsTheConnection(t *testing.T) {
	tests := []struct {
		name      string
		client    aws.HTTPClient
		wantWrite bool
	}{
		{"SDK client, unwrapped", awshttp.NewBuildableClient(), false},
		{"through sdkhttp", sdkhttp.New(nil), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rest := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				payload, _ := io.ReadAll(r.Body)
				w.Write(payload)
				w.(http.Flusher).Flush()
				<-rest
				w.Write([]byte(" and the rest"))
			}))
			defer srv.Close()
			defer close(rest)

			body := &sdkBody{r: bytes.NewReader([]byte("payload")), closed: make(chan struct{})}
			wrote := make(chan error, 1)
			req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
			req.ContentLength = int64(body.r.Len())
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				WroteRequest: func(i httptrace.WroteRequestInfo) { wrote <- i.Err }}))
			resp, err := tt.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := make([]byte, len("payload"))
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "payload" {
				t.Fatalf("first part %q, %v", first, err)
			}
			body.Close()
			werr := <-wrote
			if ok := werr == nil; ok != tt.wantWrite {
				t.Fatalf("the request's write ended with %v; want it to succeed: %v", werr, tt.wantWrite)
			}
			if !tt.wantWrite {
				return
			}
			rest <- struct{}{}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != " and the rest" {
				t.Fatalf("rest %q, %v", got, err)
			}
		})
	}
}

// TestUse: Use wraps a config's client once, whatever it held.
func TestUse(t *testing.T) {
	base := awshttp.NewBuildableClient()
	tests := []struct {
		name string
		cfg  aws.Config
	}{
		{"no client", aws.Config{}},
		{"the SDK's client", aws.Config{HTTPClient: base}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			sdkhttp.Use(&cfg)
			first, ok := cfg.HTTPClient.(*sdkhttp.Client)
			if !ok {
				t.Fatalf("client %T", cfg.HTTPClient)
			}
			sdkhttp.Use(&cfg)
			if cfg.HTTPClient != first {
				t.Fatal("Use wrapped a wrapped client again")
			}
		})
	}
}
