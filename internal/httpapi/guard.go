package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
)

// Guard protects the handler where a browser can reach it, as `pml serve`
// on a developer's machine. Any page the user visits can send requests to
// 127.0.0.1 (cross-site requests), and a page whose DNS name the attacker
// re-points at 127.0.0.1 is same-origin with the server and can read its
// answers (DNS rebinding). Behind API Gateway the Host is the API's domain
// and API Gateway authenticates, so the Lambda leaves Options.Guard nil.
type Guard struct {
	// AllowedHosts are the Host header values accepted besides loopback
	// names and addresses (localhost, 127.0.0.0/8, ::1): "name" accepts
	// any port, "name:port" only that port. Case does not matter.
	AllowedHosts []string
	// AllowedOrigins are the browser origins ("https://app.example") that
	// may call besides loopback ones (a page served from this machine,
	// such as an MCP inspector on localhost); a request carrying any other
	// Origin header is refused. Allowed origins get CORS headers, so their
	// pages can read answers.
	AllowedOrigins []string
	// Token, when not empty, must be sent as "Authorization: Bearer TOKEN"
	// on every route but GET /healthz.
	Token string
}

// guard is a Guard prepared for lookups.
type guard struct {
	hosts     map[string]bool // lower-case "name" or "name:port"
	origins   map[string]bool // lower-case, no trailing slash
	tokenHash [sha256.Size]byte
	hasToken  bool
	log       *slog.Logger
}

func newGuard(g Guard, log *slog.Logger) *guard {
	p := &guard{hosts: map[string]bool{}, origins: map[string]bool{}, log: log}
	for _, h := range g.AllowedHosts {
		name, port := splitHost(h)
		if port != "" {
			name = net.JoinHostPort(name, port)
		}
		p.hosts[name] = true
	}
	for _, o := range g.AllowedOrigins {
		p.origins[normOrigin(o)] = true
	}
	if g.Token != "" {
		p.hasToken = true
		p.tokenHash = sha256.Sum256([]byte(g.Token))
	}
	return p
}

// splitHost returns the lower-case name (IPv6 without brackets) and the
// port, "" when there is none, of a Host value.
func splitHost(hostport string) (name, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return strings.ToLower(h), p
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")), ""
}

func normOrigin(o string) string { return strings.ToLower(strings.TrimSuffix(o, "/")) }

// loopbackOrigin reports whether a browser Origin is a page served from
// this machine: http(s) on localhost or a loopback address. A rebinding or
// cross-site page cannot send one; it sends its own name.
func loopbackOrigin(o string) bool {
	scheme, rest, ok := strings.Cut(normOrigin(o), "://")
	if !ok || (scheme != "http" && scheme != "https") || strings.ContainsAny(rest, "/?#@") {
		return false
	}
	name, _ := splitHost(rest)
	return loopbackName(name)
}

// loopbackName reports whether a host name (lower-cased, without port or
// brackets) is this machine's: localhost or a loopback address.
func loopbackName(name string) bool {
	if name == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.IsLoopback()
}

// hostAllowed reports whether the Host names this server. Loopback names
// are accepted on any port: an SSH tunnel or a port forward changes the
// port a client dials, and a rebinding attacker cannot send a loopback
// Host anyway, since the browser sends the attacker's own name.
func (g *guard) hostAllowed(hostport string) bool {
	name, port := splitHost(hostport)
	if name == "" {
		return false
	}
	if loopbackName(name) {
		return true
	}
	return g.hosts[name] || (port != "" && g.hosts[net.JoinHostPort(name, port)])
}

// tokenOK compares the bearer token in constant time. Comparing digests
// keeps the token's length from leaking too.
func (g *guard) tokenOK(authorization string) bool {
	scheme, cred, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(cred)))
	return subtle.ConstantTimeCompare(sum[:], g.tokenHash[:]) == 1
}

// wrap checks, in order: the Host (so a rebinding page learns nothing, not
// even which routes exist), the Origin (answering an allowed origin's CORS
// preflight, which carries no credentials), then the token.
func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			g.log.InfoContext(r.Context(), "request refused", "reason", "host", "host", r.Host)
			httpjson.WriteError(w, http.StatusForbidden, fault.New(fault.Forbidden,
				"the Host %q is not a loopback name or an allowed host (pml serve --allowed-host)", r.Host))
			return
		}
		if approvalpage.IsPagePath(r.URL.Path) {
			// The approval page is for browsers: it signs its people in
			// (the token is for API clients, which a browser is not) and
			// refuses cross-origin forms itself. The Host check above
			// still keeps a rebinding page out.
			next.ServeHTTP(w, r)
			return
		}
		if origins := r.Header.Values("Origin"); len(origins) > 0 {
			origin := origins[0]
			if len(origins) > 1 || !(g.origins[normOrigin(origin)] || loopbackOrigin(origin)) {
				g.log.InfoContext(r.Context(), "request refused", "reason", "origin", "origin", strings.Join(origins, ", "))
				httpjson.WriteError(w, http.StatusForbidden, fault.New(fault.Forbidden,
					"requests from the web origin %q are not allowed (pml serve --allowed-origin)", origin))
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, Mcp-Protocol-Version, Mcp-Session-Id")
				h.Set("Access-Control-Max-Age", "600")
				h.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
				w.WriteHeader(http.StatusNoContent)
				return
			}
			h.Set("Access-Control-Expose-Headers", "X-Execution-Id")
		}
		// Health checks (a load balancer, a supervisor) carry no token and
		// learn nothing but that the server is up; the token's holder
		// reads the details (health).
		health := r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
		authorized := !g.hasToken || g.tokenOK(r.Header.Get("Authorization"))
		if !health && !authorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pml"`)
			httpjson.WriteError(w, http.StatusUnauthorized, fault.New(fault.Unauthorized,
				"this server requires the header Authorization: Bearer TOKEN (pml serve --token or PML_SERVE_TOKEN)"))
			return
		}
		if health && authorized {
			r = r.WithContext(context.WithValue(r.Context(), tokenHolder{}, true))
		}
		next.ServeHTTP(w, r)
	})
}

// tokenHolder marks a /healthz request that passed every check another
// route would: the right token, or a server that asks for none.
type tokenHolder struct{}

// heldToken reports whether the guard marked ctx's request as tokenHolder.
func heldToken(ctx context.Context) bool { ok, _ := ctx.Value(tokenHolder{}).(bool); return ok }
