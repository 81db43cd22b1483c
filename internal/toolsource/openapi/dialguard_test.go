package openapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/net/http/httpproxy"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// fakeDNS is a DNS server on loopback that answers every A and AAAA
// question from answer, given the name (without the final dot) and how
// many questions of that type for that name it was asked before: a name
// can resolve to one address and then to another, as a rebinding
// attacker's does.
type fakeDNS struct {
	pc     net.PacketConn
	answer func(name string, qtype dnsmessage.Type, n int) []netip.Addr
	mu     sync.Mutex
	asked  map[string]int
	done   chan struct{}
}

func startFakeDNS(t *testing.T, answer func(name string, qtype dnsmessage.Type, n int) []netip.Addr) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDNS{pc: pc, answer: answer, asked: map[string]int{}, done: make(chan struct{})}
	go d.serve()
	t.Cleanup(func() {
		_ = pc.Close()
		<-d.done
	})
	return d
}

// resolver resolves through d only (the Go resolver, /etc/hosts first).
func (d *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.pc.LocalAddr().String())
	}}
}

func (d *fakeDNS) serve() {
	defer close(d.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, ok := d.reply(buf[:n]); ok {
			_, _ = d.pc.WriteTo(out, from)
		}
	}
}

func (d *fakeDNS) reply(msg []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	key := name + "/" + q.Type.String()
	d.mu.Lock()
	n := d.asked[key]
	d.asked[key]++
	d.mu.Unlock()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
	for _, a := range d.answer(name, q.Type, n) {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			_ = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
	}
	out, err := b.Finish()
	return out, err == nil
}

// internalService stands for what must not be reached: a service on the
// host's loopback (or, by its port, on any refused address). It serves a
// document with one operation, get_ok, and counts what reaches it.
type internalService struct {
	*httptest.Server
	hits atomic.Int64
}

func newInternalService(t *testing.T) *internalService {
	t.Helper()
	s := &internalService{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/openapi.json" {
			_, _ = io.WriteString(w, docHead+`"paths":{`+okOp+`}}`)
			return
		}
		_, _ = io.WriteString(w, `{"secret":"instance credentials"}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *internalService) port() string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

// docFile writes a document whose requests go to server (none: "/", which
// a file cannot resolve, so base_url must be set).
func docFile(t *testing.T, server string) string {
	t.Helper()
	servers := ""
	if server != "" {
		servers = `"servers":[{"url":"` + server + `"}],`
	}
	path := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(path, []byte(docHead+servers+`"paths":{`+okOp+`}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// only answers questions of type qtype with as (the n-th question with
// as[min(n, len-1)] when several are listed one per question: the name
// rebinds), and every other question with nothing.
func only(qtype dnsmessage.Type, as ...netip.Addr) func(string, dnsmessage.Type, int) []netip.Addr {
	return func(_ string, t dnsmessage.Type, n int) []netip.Addr {
		if t != qtype || len(as) == 0 {
			return nil
		}
		return []netip.Addr{as[min(n, len(as)-1)]}
	}
}

// TestConnectTimeRule: whatever a name resolves to when it is checked, a
// request whose connection would reach the host's loopback, a link-local
// address (the metadata service's included), an IPv4-mapped form of one,
// or the Lambda runtime API is refused FORBIDDEN when the connection is
// made, unless the operator configured that address; nothing reaches the
// service behind it.
func TestConnectTimeRule(t *testing.T) {
	svc := newInternalService(t)
	port := svc.port()
	const name = "api.rebind.test"
	tests := []struct {
		name   string
		dns    func(string, dnsmessage.Type, int) []netip.Addr
		cfg    func() Config
		env    map[string]string
		before func(t *testing.T, r *net.Resolver) // a naive check, before the call
	}{
		{name: "a name that rebinds to loopback after the check",
			// The check sees a public address; the connection would be to
			// the host itself.
			dns: only(dnsmessage.TypeA, addrs("203.0.113.7", "127.0.0.1")...),
			cfg: func() Config { return Config{Spec: docFile(t, ""), BaseURL: "http://" + name + ":" + port} },
			before: func(t *testing.T, r *net.Resolver) {
				got, err := r.LookupNetIP(context.Background(), "ip4", name)
				if err != nil || len(got) != 1 || got[0].String() != "203.0.113.7" {
					t.Fatalf("the check resolved %v, %v; want the public address", got, err)
				}
			}},
		{name: "a name for the metadata address",
			dns: only(dnsmessage.TypeA, addrs("169.254.169.254")...),
			cfg: func() Config { return Config{Spec: docFile(t, ""), BaseURL: "http://" + name + ":" + port} }},
		{name: "a name for IPv4-mapped loopback",
			dns: only(dnsmessage.TypeAAAA, addrs("::ffff:127.0.0.1")...),
			cfg: func() Config { return Config{Spec: docFile(t, ""), BaseURL: "http://" + name + ":" + port} }},
		{name: "a name for IPv6 loopback",
			dns: only(dnsmessage.TypeAAAA, addrs("::1")...),
			cfg: func() Config { return Config{Spec: docFile(t, ""), BaseURL: "http://" + name + ":" + port} }},
		{name: "a name for an IPv6 link-local address",
			dns: only(dnsmessage.TypeAAAA, addrs("fe80::1")...),
			cfg: func() Config { return Config{Spec: docFile(t, ""), BaseURL: "http://" + name + ":" + port} }},
		{name: "the Lambda runtime API",
			dns: only(dnsmessage.TypeA, addrs("10.255.255.1")...),
			env: map[string]string{"AWS_LAMBDA_RUNTIME_API": "10.255.255.1:9001"},
			cfg: func() Config { return Config{Spec: docFile(t, ""), BaseURL: "http://" + name + ":9001"} }},
		{name: "a document's own server on loopback",
			// The operator named the file, not the address in it.
			dns: only(dnsmessage.TypeA),
			cfg: func() Config { return Config{Spec: docFile(t, "http://127.0.0.1:"+port)} }},
		{name: "a document's own server on the metadata address",
			dns: only(dnsmessage.TypeA),
			cfg: func() Config { return Config{Spec: docFile(t, "http://169.254.169.254:"+port+"/latest")} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			dns := startFakeDNS(t, tc.dns)
			cfg := tc.cfg()
			cfg.Config = toolsource.Config{Name: "svc", CallTimeout: 2 * time.Second}
			src := newGuardedSource(t, Kind{Resolver: dns.resolver()}, cfg)
			if tc.before != nil {
				tc.before(t, dns.resolver())
			}
			before := svc.hits.Load()
			out, err := src.Call(context.Background(), catalog.Tool{Server: "svc", Name: "get_ok"}, nil, execution.CallOptions{})
			fe := fault.As(err)
			if err == nil || fe.Code != fault.Forbidden || fe.Retryable {
				t.Fatalf("call: %s, %v; want FORBIDDEN, not retryable", out, err)
			}
			t.Log(fe.Message)
			if !strings.Contains(fe.Message, "refused") {
				t.Errorf("the message does not say why: %q", fe.Message)
			}
			if n := svc.hits.Load() - before; n != 0 {
				t.Errorf("%d requests reached the internal service", n)
			}
		})
	}
}

// TestConnectTimeRuleDocument: a document URL whose name resolves to
// loopback is not fetched: the server list is refused at start, saying
// why; the service behind it sees nothing.
func TestConnectTimeRuleDocument(t *testing.T) {
	svc := newInternalService(t)
	dns := startFakeDNS(t, only(dnsmessage.TypeA, addrs("127.0.0.1")...))
	_, err := openWith(Kind{Resolver: dns.resolver()}, toolsource.Env{},
		Config{Config: toolsource.Config{Name: "svc"}, Spec: "http://doc.rebind.test:" + svc.port() + "/openapi.json"})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("open: %v; want the fetch refused", err)
	}
	if n := svc.hits.Load(); n != 0 {
		t.Errorf("%d requests reached the internal service", n)
	}
}

// TestConnectTimeRuleConfigured: an address the operator wrote (base_url
// or the document's URL on 127.0.0.1, or localhost) is reached, as the
// tests of this package and a local deployment need.
func TestConnectTimeRuleConfigured(t *testing.T) {
	svc := newInternalService(t)
	for _, cfg := range []Config{
		{Spec: docFile(t, ""), BaseURL: svc.URL},
		{Spec: svc.URL + "/openapi.json"},
		{Spec: docFile(t, ""), BaseURL: "http://localhost:" + svc.port()},
		{Spec: "http://localhost:" + svc.port() + "/openapi.json"},
	} {
		t.Run(cfg.BaseURL+cfg.Spec, func(t *testing.T) {
			cfg.Config = toolsource.Config{Name: "svc"}
			src := newGuardedSource(t, Kind{}, cfg)
			out, err := src.Call(context.Background(), catalog.Tool{Server: "svc", Name: "get_ok"}, nil, execution.CallOptions{})
			if err != nil || !strings.Contains(string(out), "instance credentials") {
				t.Fatalf("call: %s, %v; want the configured service's answer", out, err)
			}
		})
	}
	// The runtime API's own address is reached when the operator names it.
	t.Setenv("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:"+svc.port())
	src := newGuardedSource(t, Kind{}, Config{Config: toolsource.Config{Name: "svc"}, Spec: docFile(t, ""), BaseURL: svc.URL})
	if _, err := src.Call(context.Background(), catalog.Tool{Server: "svc", Name: "get_ok"}, nil, execution.CallOptions{}); err != nil {
		t.Fatalf("call to the configured runtime API address: %v", err)
	}
}

// openWith is open with a kind of the test's.
func openWith(k Kind, env toolsource.Env, cfgs ...Config) (*toolsource.Set, error) {
	specs := make([]toolsource.Spec, len(cfgs))
	for i, c := range cfgs {
		specs[i] = c
	}
	env.Logger = quietLogger()
	env.Retry = toolsource.Retry{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Attempts: 1}
	return toolsource.New(context.Background(), toolsource.NewRegistry(k), specs, env)
}

func newGuardedSource(t *testing.T, k Kind, cfgs ...Config) *toolsource.Set {
	t.Helper()
	src, err := openWith(k, toolsource.Env{}, cfgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// TestDialGuardRules: what the configuration names, and which addresses
// are the host's own.
func TestDialGuardRules(t *testing.T) {
	g := newDialGuard(Config{BaseURL: "https://[::1]/v1", Spec: "http://LOCALHOST.:8080/openapi.json"}, "127.0.0.1:9001/2018-06-01",
		&httpproxy.Config{HTTPProxy: "127.0.0.1:3128", HTTPSProxy: "https://proxy.corp.test"}, nil)
	for _, target := range []string{"[::1]:443", "localhost:8080", "127.0.0.1:3128", "proxy.corp.test:443"} {
		if !g.named[normalTarget(target)] {
			t.Errorf("%s is not named; named: %v", target, g.named)
		}
	}
	named := newDialGuard(Config{BaseURL: "http://api.example.test/v1", Spec: "/etc/pml/openapi.json"}, "", nil, nil)
	if len(named.named) != 0 {
		t.Errorf("a DNS name or a file names an address: %v", named.named)
	}
	for addr, want := range map[string]string{
		"127.0.0.1:80":                "a loopback address",
		"127.8.9.10:80":               "a loopback address",
		"[::1]:80":                    "a loopback address",
		"[::ffff:127.0.0.1]:80":       "a loopback address",
		"0.0.0.0:80":                  "the unspecified address (this host)",
		"[::]:80":                     "the unspecified address (this host)",
		"169.254.169.254:80":          "the cloud metadata service's address",
		"[::ffff:169.254.169.254]:80": "the cloud metadata service's address",
		"[fd00:ec2::254]:80":          "the cloud metadata service's address",
		"169.254.170.2:80":            "a link-local address",
		"[fe80::1%eth0]:80":           "a link-local address",
		"127.0.0.1:9001":              "a loopback address",
		"10.0.0.1:80":                 "",
		"203.0.113.7:443":             "",
		"[2001:db8::1]:443":           "",
	} {
		if got := g.refused(netip.MustParseAddrPort(addr)); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
	rt := newDialGuard(Config{}, "10.1.2.3:9001", nil, nil)
	if got := rt.refused(netip.MustParseAddrPort("10.1.2.3:9001")); got != "the Lambda runtime API's address" {
		t.Errorf("the runtime API: %q", got)
	}
	if got := rt.refused(netip.MustParseAddrPort("10.1.2.3:9002")); got != "" {
		t.Errorf("another port of the runtime API's host: %q", got)
	}
}
