package openapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// ErrRefusedAddress marks a connection the connect-time rule refused: its
// address is one of the host's own (loopback, link-local, the metadata
// service, the Lambda runtime API) and the configuration did not name it.
var ErrRefusedAddress = errors.New("address refused")

// awsMetadataV6 is the AWS instance metadata service's IPv6 address (its
// IPv4 one, 169.254.169.254, is link-local).
var awsMetadataV6 = netip.MustParseAddr("fd00:ec2::254")

// dialGuard makes the connections of a server's requests (the document's
// fetch, every call, every redirect) and refuses, when each is made, one
// whose address is the host's own, unless the operator named it. The check
// is on the address actually dialled, after resolution (a Dialer's
// ControlContext): a name checked first and resolved again to connect may
// resolve to another address the second time (DNS rebinding), and a name
// is resolved once per connection.
//
// What counts as named: the host of base_url or of the document's URL
// (spec) written as an IP address or as localhost, with its port (the
// scheme's when none is written); and the proxies the environment names
// (HTTP_PROXY, HTTPS_PROXY), which make the connections themselves. A DNS
// name in the configuration is not enough: its owner, not the operator,
// says where it points. A document's own servers are never named: the
// operator named the document, not the addresses in it.
type dialGuard struct {
	// named are the dial targets ("host:port", normalised) reached
	// whatever they resolve to.
	named map[string]bool
	// runtime is the Lambda runtime API's address, when
	// AWS_LAMBDA_RUNTIME_API gives one.
	runtime netip.AddrPort
	dialer  net.Dialer
}

// dialTargetKey carries the target of a dial (what the request named) to
// the dialer's control function.
type dialTargetKey struct{}

// newDialGuard is the guard of c's requests; runtimeAPI is
// AWS_LAMBDA_RUNTIME_API's value, proxies the environment's, resolver the
// resolver of names (nil: the default).
func newDialGuard(c Config, runtimeAPI string, proxies *httpproxy.Config, resolver *net.Resolver) *dialGuard {
	g := &dialGuard{named: map[string]bool{}}
	// As http.DefaultTransport dials.
	g.dialer = net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: resolver, ControlContext: g.control}
	for _, raw := range []string{c.BaseURL, c.Spec} {
		if !isURL(raw) {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || !isAddressHost(u.Hostname()) {
			continue
		}
		g.named[dialTarget(u)] = true
	}
	if proxies != nil {
		for _, raw := range []string{proxies.HTTPProxy, proxies.HTTPSProxy} {
			if raw == "" {
				continue
			}
			if !strings.Contains(raw, "://") {
				raw = "http://" + raw // as net/http reads a bare host:port
			}
			if u, err := url.Parse(raw); err == nil && u.Host != "" {
				g.named[dialTarget(u)] = true
			}
		}
	}
	// AWS sets host:port; the emulators of this repository add a path.
	host, _, _ := strings.Cut(runtimeAPI, "/")
	if ap, err := netip.ParseAddrPort(host); err == nil {
		g.runtime = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return g
}

// isAddressHost reports whether host names an address by itself: an IP
// address, or localhost.
func isAddressHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return strings.EqualFold(strings.TrimSuffix(host, "."), "localhost")
}

// dialTarget is the "host:port" a transport dials for u, normalised.
func dialTarget(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "80"
		}
	}
	return normalTarget(net.JoinHostPort(u.Hostname(), port))
}

// normalTarget is a dial target in one spelling: the host in lower case
// without a final dot, an IP address as netip writes it.
func normalTarget(target string) string {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return strings.ToLower(target)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.String()
	} else {
		host = strings.TrimSuffix(strings.ToLower(host), ".")
	}
	return net.JoinHostPort(host, port)
}

// DialContext dials addr, checking each address it resolves to when the
// connection is made.
func (g *dialGuard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.dialer.DialContext(context.WithValue(ctx, dialTargetKey{}, addr), network, addr)
}

// control runs after the socket is made and before it connects, with the
// address it will connect to.
func (g *dialGuard) control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &refusedError{target: address, why: "not an IP address"}
	}
	why := g.refused(ap)
	if why == "" {
		return nil
	}
	target, _ := ctx.Value(dialTargetKey{}).(string)
	if g.named[normalTarget(target)] {
		return nil
	}
	return &refusedError{target: target, addr: ap, why: why}
}

// refused says why ap is one of the host's own addresses, or "" when it
// is not.
func (g *dialGuard) refused(ap netip.AddrPort) string {
	a := ap.Addr().Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsUnspecified():
		return "the unspecified address (this host)"
	case a.Is4() && a.As4() == [4]byte{169, 254, 169, 254}, a.WithZone("") == awsMetadataV6:
		return "the cloud metadata service's address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "a link-local address"
	case g.runtime.IsValid() && netip.AddrPortFrom(a, ap.Port()) == g.runtime:
		return "the Lambda runtime API's address"
	}
	return ""
}

// refusedError is a connection the connect-time rule refused.
type refusedError struct {
	target string         // what the request dialled, as it named it
	addr   netip.AddrPort // the address that resolved to
	why    string
}

func (e *refusedError) Error() string {
	to := e.target
	if e.addr.IsValid() && normalTarget(e.target) != e.addr.String() {
		to += " (" + e.addr.String() + ")"
	}
	return fmt.Sprintf("connection to %s refused: %s, which only a base_url or spec URL naming it (by its IP address, "+
		"or localhost) may reach", to, e.why)
}

// Is makes errors.Is(err, ErrRefusedAddress) find it.
func (e *refusedError) Is(target error) bool { return target == ErrRefusedAddress }
