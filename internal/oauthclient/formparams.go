package oauthclient

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
)

// withFormParams returns a client like hc whose form POSTs to tokenURL
// carry params too (unless they already do): x/oauth2 builds the refresh
// request itself and takes no extra parameters for it.
func withFormParams(hc *http.Client, tokenURL string, params map[string]string) *http.Client {
	c := *hc
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = formParams{base: base, url: tokenURL, params: params}
	return &c
}

type formParams struct {
	base   http.RoundTripper
	url    string
	params map[string]string
}

func (f formParams) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.URL.String() != f.url || req.Body == nil ||
		req.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		return f.base.RoundTrip(req)
	}
	data, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	v, err := url.ParseQuery(string(data))
	if err != nil {
		return nil, err
	}
	for k, val := range f.params {
		if !v.Has(k) {
			v.Set(k, val)
		}
	}
	body := []byte(v.Encode())
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return f.base.RoundTrip(r)
}
