package oauthclient

import (
	"errors"
	"io"
	"net/http"
)

// maxAttempts bounds the sends of one request: the first, one after a
// refresh or login, one after a step-up.
const maxAttempts = 3

// errNoRetry is returned for a challenged request whose body cannot be
// sent again.
var errNoRetry = errors.New("the request was refused and its body cannot be replayed")

// Transport puts the Source's access token on each request and answers
// the server's Bearer challenges: a 401 renews the token (re-reading the
// store, refreshing, or authorizing), a 403 insufficient_scope steps up;
// then the request is sent again. It sits under mcp-go's transports, so
// that SSE and streamable HTTP, and their GET streams, get the same.
type Transport struct {
	Base   http.RoundTripper
	Source *Source
}

// RoundTrip sends req with a token, answering at most maxAttempts-1
// challenges.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for attempt := 1; ; attempt++ {
		tok, err := t.Source.Token(ctx)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		r := req
		if attempt > 1 || tok != "" {
			r = req.Clone(ctx)
			if attempt > 1 {
				if req.GetBody == nil && req.Body != nil && req.Body != http.NoBody {
					return nil, errNoRetry
				}
				if req.GetBody != nil {
					if r.Body, err = req.GetBody(); err != nil {
						return nil, err
					}
				}
			}
			if tok != "" {
				r.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		resp, err := t.Base.RoundTrip(r)
		if err != nil || attempt == maxAttempts {
			return resp, err
		}
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			return resp, nil
		}
		ch := ParseChallenge(resp.Header)
		if !ch.Bearer || (resp.StatusCode == http.StatusForbidden && ch.Error != "insufficient_scope") {
			return resp, nil
		}
		// The answer is replaced by the retry's.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err := t.Source.Handle(ctx, resp.StatusCode, ch, tok); err != nil {
			return nil, err
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
