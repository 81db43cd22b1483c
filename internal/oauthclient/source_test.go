package oauthclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
	"github.com/pml-sandbox/pml/internal/testutil/oauthserver"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
)

// clock is a settable time for Sources, so that tests expire tokens
// without waiting.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fixture is an authorization server and a resource it protects.
type fixture struct {
	as       *oauthserver.Server
	resource string
	secrets  *secretSet
	logs     *syncbuf.Buffer
}

func newFixture(t *testing.T, o oauthserver.Options) *fixture {
	t.Helper()
	as := oauthserver.Start(t, o)
	f := &fixture{as: as, secrets: &secretSet{}, logs: &syncbuf.Buffer{}}
	var rs *httptest.Server
	rs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as.Protect(rs.URL+"/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "ok")
		})).ServeHTTP(w, r)
	}))
	t.Cleanup(rs.Close)
	f.resource = rs.URL + "/mcp"
	return f
}

// secretSet records what Sources report as secrets.
type secretSet struct {
	mu sync.Mutex
	s  []string
}

func (s *secretSet) Add(v ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range v {
		if x != "" {
			s.s = append(s.s, x)
		}
	}
}

func (s *secretSet) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.s...)
}

func (f *fixture) source(t *testing.T, store oauthclient.Store, agent oauthclient.UserAgent, now func() time.Time, cfg oauthclient.Config) *oauthclient.Source {
	return oauthclient.NewSource(oauthclient.Options{Server: "secure", URL: f.resource, Config: cfg, Store: store, Agent: agent,
		LoginHint: func(args string) string { return "run `pml mcp login secure" + args + "`" }, Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		AddSecret: f.secrets.Add, Now: now})
}

// get fetches the resource through the Source's Transport.
func get(t *testing.T, f *fixture, src *oauthclient.Source) (string, error) {
	t.Helper()
	c := &http.Client{Transport: &oauthclient.Transport{Base: http.DefaultTransport, Source: src}}
	resp, err := c.Post(f.resource, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	return string(b), nil
}

func TestLoginRefreshRevoke(t *testing.T) {
	f := newFixture(t, oauthserver.Options{})
	dir := filepath.Join(t.TempDir(), "creds")
	store := oauthclient.FileStore{Path: oauthclient.FilePath(dir, "secure")}
	clk := &clock{t: time.Now()}

	// A first request logs in through the headless agent (the server
	// answers 401), registering the client dynamically.
	src := f.source(t, store, oauthclient.Headless{}, clk.Now, oauthclient.Config{})
	if body, err := get(t, f, src); err != nil || body != "ok" {
		t.Fatalf("first request: %q, %v", body, err)
	}
	if c := f.as.Counts(); c.Registrations != 1 || c.Authorizations != 1 || c.CodeExchanges != 1 {
		t.Fatalf("counts after login %+v", c)
	}
	info, err := os.Stat(store.Path)
	if err != nil {
		t.Fatal(err)
	}
	dinfo, _ := os.Stat(dir)
	if info.Mode().Perm() != 0o600 || dinfo.Mode().Perm() != 0o700 {
		t.Errorf("credentials file %v, directory %v; want 0600 and 0700", info.Mode(), dinfo.Mode())
	}
	first := readCreds(t, store)
	if first.RefreshToken == "" || first.URL != f.resource || first.Resource != f.resource {
		t.Fatalf("stored %v", first)
	}

	// Another process (a new Source, no agent) uses the stored token.
	other := f.source(t, store, nil, clk.Now, oauthclient.Config{Type: oauthclient.TypeOAuth})
	if _, err := get(t, f, other); err != nil {
		t.Fatal(err)
	}
	if c := f.as.Counts(); c.Authorizations != 1 || c.Refreshes != 0 {
		t.Fatalf("a stored token was not reused: %+v", c)
	}

	// Past the access token's expiry the refresh token is traded, and the
	// rotated one is stored.
	clk.Add(2 * time.Hour)
	if _, err := get(t, f, other); err != nil {
		t.Fatal(err)
	}
	second := readCreds(t, store)
	if c := f.as.Counts(); c.Refreshes != 1 || c.ReuseDetected != 0 {
		t.Fatalf("counts after expiry %+v", c)
	}
	if second.RefreshToken == first.RefreshToken || !f.as.RefreshTokenValid(second.RefreshToken) || f.as.RefreshTokenValid(first.RefreshToken) {
		t.Fatalf("refresh token not rotated and stored")
	}
	if second.Lease != nil {
		t.Errorf("lease left behind: %+v", second.Lease)
	}

	// A token the server rejects before its expiry: the Source re-reads,
	// refreshes and retries. Revoked grants end in LoginRequired, which
	// names the server and the command.
	f.as.RevokeAll()
	_, err = get(t, f, other)
	var ae *oauthclient.Error
	if !errors.As(err, &ae) || ae.Kind != oauthclient.LoginRequired || !strings.Contains(err.Error(), `"secure"`) || !strings.Contains(err.Error(), "pml mcp login secure") {
		t.Fatalf("after revocation: %v; want LoginRequired naming the server and the command", err)
	}
	st := other.Status(context.Background())
	if st.State != "logged in" || !st.RefreshToken {
		t.Errorf("status %+v", st)
	}
	checkNoSecrets(t, f, err.Error())
}

// TestStoredForAnotherURL: credentials stored for another URL under the
// same name are never sent.
func TestStoredForAnotherURL(t *testing.T) {
	f := newFixture(t, oauthserver.Options{})
	store := oauthclient.FileStore{Path: filepath.Join(t.TempDir(), "secure.json")}
	if _, err := store.Save(context.Background(), &oauthclient.Credentials{Server: "secure", URL: "https://elsewhere.example/mcp", AccessToken: "tok-elsewhere-1234"}, ""); err != nil {
		t.Fatal(err)
	}
	src := f.source(t, store, nil, time.Now, oauthclient.Config{Type: oauthclient.TypeOAuth})
	tok, err := src.Token(context.Background())
	if tok != "" || err == nil {
		t.Fatalf("Token = %q, %v; want none and LoginRequired", tok, err)
	}
}

func readCreds(t *testing.T, s oauthclient.Store) *oauthclient.Credentials {
	t.Helper()
	c, _, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkNoSecrets fails when a secret a Source handled appears in its logs
// or in text.
func checkNoSecrets(t *testing.T, f *fixture, texts ...string) {
	t.Helper()
	secrets := f.secrets.all()
	if len(secrets) < 3 {
		t.Fatalf("only %d secrets reported", len(secrets))
	}
	for _, s := range secrets {
		if len(s) < 4 {
			continue
		}
		if strings.Contains(f.logs.String(), s) {
			t.Errorf("a secret (%.6s…) is in the logs", s)
		}
		for _, x := range texts {
			if strings.Contains(x, s) {
				t.Errorf("a secret (%.6s…) is in %q", s, x)
			}
		}
	}
}

// TestConcurrentRefresh: processes that share a store and find the token
// expired at once trade the refresh token once; the others wait for its
// result. An authorization server that revokes a family on reuse would
// otherwise log everyone out.
func TestConcurrentRefresh(t *testing.T) {
	m := moto.Start(t)
	for name, newStore := range map[string]func(t *testing.T) oauthclient.Store{
		"file": func(t *testing.T) oauthclient.Store {
			return oauthclient.FileStore{Path: filepath.Join(t.TempDir(), "secure.json")}
		},
		"secret": func(t *testing.T) oauthclient.Store {
			return oauthclient.SecretStore{API: m.Client(), ARN: m.CreateSecret(t, "pml/"+strings.ReplaceAll(t.Name(), "/", "-"))}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, oauthserver.Options{})
			store := newStore(t)
			if _, err := f.source(t, store, oauthclient.Headless{}, time.Now, oauthclient.Config{}).Login(context.Background(), oauthclient.Challenge{}, nil); err != nil {
				t.Fatal(err)
			}
			clk := &clock{t: time.Now().Add(2 * time.Hour)}
			const procs = 6
			var wg sync.WaitGroup
			errs := make([]error, procs)
			for i := range procs {
				src := f.source(t, store, nil, clk.Now, oauthclient.Config{Type: oauthclient.TypeOAuth})
				wg.Go(func() { _, errs[i] = get(t, f, src) })
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("process %d: %v", i, err)
				}
			}
			if c := f.as.Counts(); c.Refreshes != 1 || c.ReuseDetected != 0 {
				t.Errorf("counts %+v; want one refresh and no reuse", c)
			}
			if c := readCreds(t, store); !f.as.RefreshTokenValid(c.RefreshToken) || c.Lease != nil {
				t.Errorf("stored refresh token valid=%v, lease %+v", f.as.RefreshTokenValid(c.RefreshToken), c.Lease)
			}
		})
	}
}

// TestSecretStoreVersionCheck: a write over a version that is no longer
// current is refused, even though nothing else than PutSecretValue is
// used; the same write again (an SDK retry) is accepted.
func TestSecretStoreVersionCheck(t *testing.T) {
	m := moto.Start(t)
	ctx := context.Background()
	s := oauthclient.SecretStore{API: m.Client(), ARN: m.CreateSecret(t, "pml/version-check")}
	if _, _, err := s.Load(ctx); !errors.Is(err, oauthclient.ErrNoCredentials) {
		t.Fatalf("empty secret: %v; want ErrNoCredentials", err)
	}
	v1, err := s.Save(ctx, &oauthclient.Credentials{Server: "a", RefreshToken: "rt-one-1234"}, "")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.Save(ctx, &oauthclient.Credentials{Server: "a", RefreshToken: "rt-two-1234"}, v1)
	if err != nil {
		t.Fatal(err)
	}
	// Another writer that read v1 too.
	if _, err := s.Save(ctx, &oauthclient.Credentials{Server: "a", RefreshToken: "rt-three-1234"}, v1); !errors.Is(err, oauthclient.ErrConflict) {
		t.Fatalf("stale write: %v; want ErrConflict", err)
	}
	if _, err := s.Save(ctx, &oauthclient.Credentials{Server: "a", RefreshToken: "rt-two-1234"}, v1); err != nil {
		t.Fatalf("replayed write: %v", err)
	}
	c, v, err := s.Load(ctx)
	if err != nil || c.RefreshToken != "rt-two-1234" || v != v2 {
		t.Fatalf("Load = %v, %q, %v; want the second write", c, v, err)
	}
}

func TestClientCredentials(t *testing.T) {
	f := newFixture(t, oauthserver.Options{Clients: map[string]string{"svc": "svc-secret-5678"}})
	src := f.source(t, nil, nil, time.Now, oauthclient.Config{Type: oauthclient.TypeClientCredentials, ClientID: "svc", ClientSecret: "svc-secret-5678"})
	for range 3 {
		if _, err := get(t, f, src); err != nil {
			t.Fatal(err)
		}
	}
	if c := f.as.Counts(); c.ClientCredentials != 1 {
		t.Fatalf("counts %+v; want one token for three requests", c)
	}
	bad := f.source(t, nil, nil, time.Now, oauthclient.Config{Type: oauthclient.TypeClientCredentials, ClientID: "svc", ClientSecret: "wrong-secret-0000"})
	_, err := get(t, f, bad)
	var ae *oauthclient.Error
	if !errors.As(err, &ae) || ae.Kind != oauthclient.Refused {
		t.Fatalf("wrong secret: %v; want Refused", err)
	}
	checkNoSecrets(t, f, err.Error())
}

// TestStepUp: a 403 insufficient_scope is answered by one authorization
// for the union of the scopes, and a server that keeps refusing is not
// asked forever.
func TestStepUp(t *testing.T) {
	as := oauthserver.Start(t, oauthserver.Options{ScopesSupported: []string{"read"}})
	var rs *httptest.Server
	rs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as.Protect(rs.URL+"/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "ok")
		}), "read", "write").ServeHTTP(w, r)
	}))
	t.Cleanup(rs.Close)
	f := &fixture{as: as, resource: rs.URL + "/mcp", secrets: &secretSet{}, logs: &syncbuf.Buffer{}}

	// A login that got only what scopes_supported lists...
	store := oauthclient.FileStore{Path: filepath.Join(t.TempDir(), "secure.json")}
	if _, err := f.source(t, store, oauthclient.Headless{}, time.Now, oauthclient.Config{}).Login(context.Background(), oauthclient.Challenge{}, nil); err != nil {
		t.Fatal(err)
	}
	// ...is not enough for this resource: without an agent, the step-up
	// is an error that says what to run.
	_, err := get(t, f, f.source(t, store, nil, time.Now, oauthclient.Config{}))
	var ae *oauthclient.Error
	if !errors.As(err, &ae) || ae.Kind != oauthclient.StepUpRequired || !strings.Contains(err.Error(), `pml mcp login secure --scope "read write"`) {
		t.Fatalf("without an agent: %v; want StepUpRequired with the login command", err)
	}
	// With one, the client authorizes once more, for the union of scopes.
	src := f.source(t, store, oauthclient.Headless{}, time.Now, oauthclient.Config{})
	if _, err := get(t, f, src); err != nil {
		t.Fatalf("with an agent: %v", err)
	}
	if c := as.Counts(); c.Authorizations != 2 {
		t.Fatalf("counts %+v; want a login and a step-up", c)
	}
	if st := src.Status(context.Background()); strings.Join(st.Scopes, " ") != "read write" {
		t.Errorf("scopes after step-up %v", st.Scopes)
	}
	checkNoSecrets(t, f, err.Error())
}

// TestCredentialsNeverPrinted: however credentials are printed or logged,
// by value or by pointer, no secret field shows.
func TestCredentialsNeverPrinted(t *testing.T) {
	c := oauthclient.Credentials{Server: "s", ClientID: "id", ClientSecret: "cs-SECRET-1", PrivateKey: "pk-SECRET-2",
		RefreshToken: "rt-SECRET-3", AccessToken: "at-SECRET-4", Expiry: time.Now()}
	var logs strings.Builder
	l := slog.New(slog.NewJSONHandler(&logs, nil))
	l.Info("v", "creds", c)
	l.Info("p", "creds", &c)
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprintf("%v %+v %#v %s", &c, &c, &c, &c), logs.String()} {
		if strings.Contains(s, "SECRET") {
			t.Errorf("printed credentials hold a secret: %s", s)
		}
	}
}

// TestOneLoginForConcurrentRequests: requests that all meet the server's
// challenge at once are answered by one authorization.
func TestOneLoginForConcurrentRequests(t *testing.T) {
	f := newFixture(t, oauthserver.Options{})
	src := f.source(t, nil, oauthclient.Headless{}, time.Now, oauthclient.Config{})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = get(t, f, src) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if c := f.as.Counts(); c.Authorizations != 1 {
		t.Errorf("counts %+v; want one authorization", c)
	}
}

// TestAuthorizationServerMoved: when the resource starts naming another
// authorization server, a rejected token is not refreshed at the old one;
// the client registers and authorizes at the new one.
func TestAuthorizationServerMoved(t *testing.T) {
	as1 := oauthserver.Start(t, oauthserver.Options{})
	as2 := oauthserver.Start(t, oauthserver.Options{})
	var moved atomic.Bool
	var rs *httptest.Server
	rs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as := as1
		if moved.Load() {
			as = as2
		}
		as.Protect(rs.URL+"/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "ok")
		})).ServeHTTP(w, r)
	}))
	t.Cleanup(rs.Close)
	f := &fixture{as: as1, resource: rs.URL + "/mcp", secrets: &secretSet{}, logs: &syncbuf.Buffer{}}
	src := f.source(t, oauthclient.FileStore{Path: filepath.Join(t.TempDir(), "s.json")}, oauthclient.Headless{}, time.Now, oauthclient.Config{})
	if _, err := get(t, f, src); err != nil {
		t.Fatal(err)
	}
	moved.Store(true)
	if _, err := get(t, f, src); err != nil {
		t.Fatal(err)
	}
	if c1, c2 := as1.Counts(), as2.Counts(); c1.Refreshes != 0 || c2.Registrations != 1 || c2.Authorizations != 1 {
		t.Errorf("old server %+v, new server %+v; want no refresh at the old one, a registration and a login at the new one", c1, c2)
	}
	if st := src.Status(context.Background()); st.Issuer != as2.URL {
		t.Errorf("issuer %q; want the new server's", st.Issuer)
	}
}
