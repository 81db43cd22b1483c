package oauthclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/mark3labs/mcp-go/client/transport"
)

// maxMetadataBytes caps a metadata or registration document.
const maxMetadataBytes = 1 << 20

// ResourceMetadata is a protected resource's metadata (RFC 9728 §2).
type ResourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported,omitempty"`
}

// ServerMetadata is an authorization server's metadata (RFC 8414, or
// OpenID Connect Discovery): mcp-go's type plus the fields MCP 2025-11-25
// added.
type ServerMetadata struct {
	transport.AuthServerMetadata
	// ClientIDMetadataDocumentSupported: the server accepts an HTTPS URL
	// as client_id and fetches the client's metadata from it.
	ClientIDMetadataDocumentSupported bool `json:"client_id_metadata_document_supported,omitempty"`
	// IssParameterSupported: the server names itself in the authorization
	// response (RFC 9207), which the client must then check.
	IssParameterSupported bool `json:"authorization_response_iss_parameter_supported,omitempty"`
}

// Discovery is what the client learned about a server's authorization.
type Discovery struct {
	// Resource is the RFC 8707 resource indicator: the protected resource
	// metadata's resource, else the server URL.
	Resource string
	// ResourceScopes is the metadata's scopes_supported.
	ResourceScopes []string
	// Issuer is the authorization server's issuer identifier.
	Issuer string
	Server ServerMetadata
}

// discover finds the authorization server of serverURL the way MCP
// 2025-11-25 says: the protected resource metadata named by the challenge,
// else at the path-inserted well-known URL, else at the root one (RFC 9728
// §3.1); then the authorization server's metadata at RFC 8414's
// path-inserted URL, then OpenID Connect's two (RFC 8414 §5, OIDC
// Discovery §4). A server without resource metadata is read the
// 2025-03-26 way: its origin is the authorization server.
func discover(ctx context.Context, hc *http.Client, serverURL string, ch Challenge) (*Discovery, error) {
	su, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("server URL: %w", err)
	}
	var candidates []string
	if ch.ResourceMetadata != "" {
		candidates = append(candidates, ch.ResourceMetadata)
	}
	candidates = append(candidates, wellKnown(su, "oauth-protected-resource", true))
	if root := wellKnown(su, "oauth-protected-resource", false); root != candidates[len(candidates)-1] {
		candidates = append(candidates, root)
	}
	var prm *ResourceMetadata
	var prmErrs []error
	for _, c := range candidates {
		var m ResourceMetadata
		found, err := getJSON(ctx, hc, c, &m)
		if err != nil {
			prmErrs = append(prmErrs, err)
			continue
		}
		if !found {
			continue
		}
		prm = &m
		break
	}
	d := &Discovery{Resource: canonicalResource(su)}
	issuer := originOf(su)
	if prm != nil {
		if prm.Resource != "" {
			// RFC 9728 §3.3: metadata for another resource must not be
			// used, or a server could have tokens minted for another.
			if !resourceCovers(prm.Resource, su) {
				return nil, fmt.Errorf("protected resource metadata names resource %q, which is not %s", prm.Resource, d.Resource)
			}
			d.Resource = prm.Resource
		}
		d.ResourceScopes = prm.ScopesSupported
		if len(prm.AuthorizationServers) == 0 {
			return nil, errors.New("protected resource metadata names no authorization server")
		}
		issuer = prm.AuthorizationServers[0]
	} else if len(prmErrs) > 0 {
		return nil, fmt.Errorf("protected resource metadata: %w", errors.Join(prmErrs...))
	}
	iu, err := url.Parse(issuer)
	if err != nil || (iu.Scheme != "https" && iu.Scheme != "http") || iu.Host == "" {
		return nil, fmt.Errorf("authorization server %q is not an absolute http(s) URL", issuer)
	}
	for _, c := range serverMetadataURLs(iu) {
		var m ServerMetadata
		found, err := getJSON(ctx, hc, c, &m)
		if err != nil {
			return nil, fmt.Errorf("authorization server metadata: %w", err)
		}
		if !found {
			continue
		}
		// RFC 8414 §3.3: the document must name the issuer it was
		// fetched for, or another server could pose as this one.
		if strings.TrimSuffix(m.Issuer, "/") != strings.TrimSuffix(issuer, "/") {
			return nil, fmt.Errorf("authorization server metadata at %s names issuer %q, not %q", c, m.Issuer, issuer)
		}
		if err := checkServerMetadata(&m); err != nil {
			return nil, fmt.Errorf("authorization server metadata at %s: %w", c, err)
		}
		d.Issuer, d.Server = m.Issuer, m
		return d, nil
	}
	return nil, fmt.Errorf("no authorization server metadata for %s (tried RFC 8414 and OpenID Connect discovery)", issuer)
}

// checkServerMetadata refuses metadata the flows cannot use safely: no
// token endpoint, or endpoints that would carry credentials in clear text
// to another host.
func checkServerMetadata(m *ServerMetadata) error {
	if m.TokenEndpoint == "" {
		return errors.New("no token_endpoint")
	}
	for name, v := range map[string]string{
		"token_endpoint":         m.TokenEndpoint,
		"authorization_endpoint": m.AuthorizationEndpoint,
		"registration_endpoint":  m.RegistrationEndpoint,
	} {
		if v == "" {
			continue
		}
		if err := secureURL(v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// secureURL accepts https URLs, and http ones on a loopback host (a
// development server, or the tests'): OAuth 2.1 §1.5 forbids sending
// credentials anywhere else in clear text.
func secureURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
	}
	return fmt.Errorf("%q is neither https nor http on a loopback host", raw)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// wellKnown is u's origin with /.well-known/<suffix>, followed by u's path
// when pathInserted (RFC 8414 §3.1, RFC 9728 §3.1).
func wellKnown(u *url.URL, suffix string, pathInserted bool) string {
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	out := originOf(u) + "/.well-known/" + suffix
	if pathInserted && path != "" {
		out += path
	}
	return out
}

// serverMetadataURLs lists the places an issuer's metadata may be, in the
// order MCP 2025-11-25 gives.
func serverMetadataURLs(issuer *url.URL) []string {
	path := strings.Trim(issuer.EscapedPath(), "/")
	origin := originOf(issuer)
	if path == "" {
		return []string{
			origin + "/.well-known/oauth-authorization-server",
			origin + "/.well-known/openid-configuration",
		}
	}
	return []string{
		origin + "/.well-known/oauth-authorization-server/" + path,
		origin + "/.well-known/openid-configuration/" + path,
		origin + "/" + path + "/.well-known/openid-configuration",
	}
}

func originOf(u *url.URL) string { return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) }

// canonicalResource is the server URL as a resource indicator (RFC 8707
// §2; MCP's canonical server URI): lower-case scheme and host, no
// fragment, no trailing slash.
func canonicalResource(u *url.URL) string {
	c := *u
	c.Scheme, c.Host, c.Fragment, c.RawFragment, c.User = strings.ToLower(c.Scheme), strings.ToLower(c.Host), "", "", nil
	s := c.String()
	if c.RawQuery == "" {
		s = strings.TrimSuffix(s, "/")
	}
	return s
}

// resourceCovers reports whether the resource identifier names the server
// at u: the same origin, and a path equal to u's or a prefix of it that
// ends on a segment boundary (a server at /mcp may name its origin).
func resourceCovers(resource string, u *url.URL) bool {
	r, err := url.Parse(resource)
	if err != nil || r.Fragment != "" || r.User != nil {
		return false
	}
	if !strings.EqualFold(r.Scheme, u.Scheme) || !strings.EqualFold(r.Host, u.Host) {
		return false
	}
	if r.RawQuery != "" && r.RawQuery != u.RawQuery {
		return false
	}
	rp, up := strings.TrimSuffix(r.EscapedPath(), "/"), strings.TrimSuffix(u.EscapedPath(), "/")
	return rp == up || strings.HasPrefix(up, rp+"/")
}

// getJSON fetches a metadata document: found is false on 404 and other
// 4xx answers (the next candidate is tried), an error on anything else
// that is not a JSON document.
func getJSON(ctx context.Context, hc *http.Client, rawURL string, v any) (found bool, err error) {
	if err := secureURL(rawURL); err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("MCP-Protocol-Version", protocolVersion)
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxMetadataBytes))
		return false, nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("GET %s: HTTP %d", rawURL, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxMetadataBytes)).Decode(v); err != nil {
		return false, fmt.Errorf("GET %s: %w", rawURL, err)
	}
	return true, nil
}
