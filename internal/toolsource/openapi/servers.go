package openapi

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// serverURL is a server's URL with its variables at their defaults,
// resolved against the document's location.
func serverURL(s *openapi3.Server, doc *url.URL) (*url.URL, error) {
	raw := s.URL
	for name, v := range s.Variables {
		if v != nil {
			raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
		}
	}
	if strings.ContainsAny(raw, "{}") {
		return nil, fmt.Errorf("server %q: a variable has no default", s.URL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", s.URL, unwrapURLError(err))
	}
	if !u.IsAbs() {
		if doc == nil || (doc.Scheme != "http" && doc.Scheme != "https") {
			return nil, fmt.Errorf("server %q is relative and the document was not read from a URL: set base_url", s.URL)
		}
		u = doc.ResolveReference(u)
	}
	return u, checkBase(u)
}

// checkBase reports whether u can be a base URL: absolute http(s),
// without credentials (they belong in headers, where they are masked),
// query or fragment.
func checkBase(u *url.URL) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("server %s: want an http or https URL", u.Redacted())
	case u.Host == "":
		return fmt.Errorf("server %s has no host", u.Redacted())
	case u.User != nil:
		return errors.New("a server URL may not hold credentials: put them in headers")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("server %s: a base URL has no query or fragment", u.Redacted())
	}
	return nil
}

// unwrapURLError drops *url.Error's quoting of the whole URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// documentBase chooses the base URL of a document's requests: the
// configured one, else the document's first server, which must be on the
// host the document came from when it came from a URL (a document must
// not be able to send the host's requests, with their credentials,
// anywhere else; an operator who means another host says so in
// base_url). fixed reports a configured base, which per-path and
// per-operation servers do not override.
func documentBase(doc *openapi3.T, docURL *url.URL, configured string) (base *url.URL, fixed bool, err error) {
	if configured != "" {
		u, err := url.Parse(configured)
		if err != nil {
			return nil, false, fmt.Errorf("base_url: %w", unwrapURLError(err))
		}
		if err := checkBase(u); err != nil {
			return nil, false, fmt.Errorf("base_url: %w", err)
		}
		return u, true, nil
	}
	s := &openapi3.Server{URL: "/"}
	if len(doc.Servers) > 0 && doc.Servers[0] != nil {
		s = doc.Servers[0]
	}
	u, err := serverURL(s, docURL)
	if err != nil {
		return nil, false, err
	}
	if err := sameHost(u, docURL); err != nil {
		return nil, false, err
	}
	return u, false, nil
}

// sameHost refuses a server on another host than a document read from a
// URL.
func sameHost(u, docURL *url.URL) error {
	if docURL == nil || (docURL.Scheme != "http" && docURL.Scheme != "https") {
		return nil
	}
	if !strings.EqualFold(u.Host, docURL.Host) {
		return fmt.Errorf("%w: %s is not on %s, where the document came from (set base_url to call it)",
			ErrForeignServer, u.Redacted(), docURL.Host)
	}
	return nil
}

// operationServer is an operation's own server (operation level, else
// path level), nil when it has none; it must be on the base's host.
func operationServer(r *opRef, base *url.URL) (*url.URL, error) {
	servers := r.item.Servers
	if r.op.Servers != nil && len(*r.op.Servers) > 0 {
		servers = *r.op.Servers
	}
	if len(servers) == 0 || servers[0] == nil {
		return nil, nil
	}
	u, err := serverURL(servers[0], base)
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(u.Host, base.Host) || u.Scheme != base.Scheme {
		return nil, fmt.Errorf("%w: the operation's server %s is not on %s", ErrForeignServer, u.Redacted(), base.Host)
	}
	return u, nil
}
