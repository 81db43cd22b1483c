package secretref

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
)

// Headers keeps a configured set of HTTP headers resolved for a client
// whose requests are built elsewhere (mcp-go's transports): Current is
// what to send now, and Transport sends a refused request again once with
// rotated values.
type Headers struct {
	refs   *Resolver
	config map[string]string
	// learn is told every resolved value before it can be sent (the
	// redactors).
	learn func(name, value string)
	// rotates: some value references a Secrets Manager secret, which a
	// refusal may mean was rotated.
	rotates bool
	cur     atomic.Pointer[map[string]string]
}

// NewHeaders returns the headers config (values may hold references)
// resolved through refs; learn (may be nil) is told each resolved value.
// Nothing is resolved until Resolve.
func NewHeaders(refs *Resolver, config map[string]string, learn func(name, value string)) *Headers {
	h := &Headers{refs: refs, config: config, learn: learn}
	for _, v := range config {
		h.rotates = h.rotates || HasSecret(v)
	}
	empty := map[string]string{}
	h.cur.Store(&empty)
	return h
}

// Resolve resolves every header now (a secret from the cache while it is
// fresh), makes them Current and returns them. A value with a line break
// is refused: it would split the header.
func (h *Headers) Resolve(ctx context.Context) (map[string]string, error) {
	out := make(map[string]string, len(h.config))
	for k, v := range h.config {
		r, err := h.refs.Resolve(ctx, "header "+k, v)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(r, "\r\n") {
			return nil, fmt.Errorf("header %s: resolved value contains a line break", k)
		}
		if h.learn != nil {
			h.learn(k, r)
		}
		out[k] = r
	}
	h.cur.Store(&out)
	return out, nil
}

// Current is the headers last resolved; the map must not be changed.
func (h *Headers) Current() map[string]string { return *h.cur.Load() }

// Transport wraps base: a request refused with 401 or 403 while a header
// references a Secrets Manager secret has those secrets read again
// (Resolver.Refresh), and when one changed (rotated), is sent once more
// with the new values, which become Current. A request whose body cannot
// be read again is not sent again.
func (h *Headers) Transport(base http.RoundTripper) http.RoundTripper {
	if !h.rotates {
		return base
	}
	return &rotating{h: h, base: base}
}

type rotating struct {
	h    *Headers
	base http.RoundTripper
}

func (t *rotating) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || (resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden) {
		return resp, err
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return resp, nil
	}
	ctx := req.Context()
	changed, rerr := t.h.refs.Refresh(ctx, valuesOf(t.h.config)...)
	if rerr != nil || !changed {
		return resp, nil
	}
	headers, rerr := t.h.Resolve(ctx)
	if rerr != nil {
		return resp, nil
	}
	again := req.Clone(ctx)
	if req.GetBody != nil {
		body, berr := req.GetBody()
		if berr != nil {
			return resp, nil
		}
		again.Body = body
	}
	for k, v := range headers {
		again.Header.Set(k, v)
	}
	// The refusal is dropped: its connection goes back to the pool.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return t.base.RoundTrip(again)
}

func valuesOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for v := range maps.Values(m) {
		out = append(out, v)
	}
	return out
}

// HeaderSecrets is what a resolved header value makes secret: the value
// and, for "Scheme credentials" values such as "Bearer TOKEN", the
// credentials alone, which a server may quote without the scheme.
func HeaderSecrets(v string) []string {
	out := []string{v}
	if f := strings.Fields(v); len(f) > 1 {
		out = append(out, f[1:]...)
	}
	return out
}
