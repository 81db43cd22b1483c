package secretref_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Every secret here contains this marker, so that one search finds a leak.
const marker = "SECRET"

func TestCheck(t *testing.T) {
	for v, want := range map[string]string{
		"plain":               "",
		"Bearer ${env:TOKEN}": "",
		"${file:/run/key}":    "",
		"${secret:arn:aws:secretsmanager:us-east-1:1:secret:k-AbCdEf}": "",
		"${secret:team/api#token}":                                     "",
		"${env:}":                                                      "empty",
		"${file:relative/key}":                                         "absolute",
		"${secret:}":                                                   "empty",
		"${secret:#key}":                                               "ARN-or-name",
		"${secret:name#}":                                              "ARN-or-name",
	} {
		err := secretref.Check(v)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(%q) = %v; want %q", v, err, want)
		}
	}
	if !secretref.HasSecret("x ${secret:a}") || secretref.HasSecret("${env:A}") || !secretref.Has("${env:A}") || secretref.Has("$A") {
		t.Error("Has/HasSecret")
	}
}

func TestResolveEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SECRETREF_TEST", "env-secret")
	r := secretref.New(nil, secretref.Options{})
	for _, tc := range []struct{ in, want, wantErr string }{
		{in: "Bearer ${env:SECRETREF_TEST}", want: "Bearer env-secret"},
		{in: "${file:" + keyFile + "}", want: "file-secret"},
		{in: "${env:SECRETREF_TEST}-${file:" + keyFile + "}", want: "env-secret-file-secret"},
		{in: "plain", want: "plain"},
		{in: "${env:SECRETREF_NOPE}", wantErr: "SECRETREF_NOPE is not set"},
		{in: "${file:" + filepath.Join(dir, "none") + "}", wantErr: "secret file"},
		{in: "${secret:somewhere}", wantErr: "no AWS Secrets Manager client"},
	} {
		got, err := r.Resolve(context.Background(), "header X", tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "header X") {
				t.Errorf("%s: err %v; want %q naming the header", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// counting counts the reads that reach Secrets Manager.
type counting struct {
	api   secretref.API
	reads atomic.Int64
}

func (c *counting) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.reads.Add(1)
	return c.api.GetSecretValue(ctx, in, opts...)
}

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
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newResolver(m *moto.Server, clk *clock) (*secretref.Resolver, *counting) {
	c := &counting{api: m.Client()}
	return secretref.New(func(context.Context) (secretref.API, error) { return c, nil }, secretref.Options{Now: clk.Now, TTL: time.Minute}), c
}

// TestSecretsManager: ${secret:} reads a secret's string by name or ARN,
// or a key of a JSON secret, through moto's Secrets Manager; keeps it for
// its lifetime (one read however many resolve it, at once or after);
// reads it again when it expires, and on Refresh, which says whether it
// changed and reads an unchanged secret only once per lifetime. No error
// quotes a secret.
func TestSecretsManager(t *testing.T) {
	m := moto.Start(t)
	ctx := context.Background()
	arn := m.PutSecret(t, "team/token", "tok-"+marker+"-1")
	m.PutSecret(t, "team/json", `{"api_key": "k-`+marker+`-9", "port": 8443, "nested": {"a": 1}}`)
	m.PutSecret(t, "team/text", "not json "+marker)

	t.Run("resolve", func(t *testing.T) {
		r, _ := newResolver(m, &clock{t: time.Now()})
		for in, want := range map[string]string{
			"Bearer ${secret:team/token}":             "Bearer tok-" + marker + "-1",
			"${secret:" + arn + "}":                   "tok-" + marker + "-1",
			"${secret:team/json#api_key}":             "k-" + marker + "-9",
			"${secret:team/json#port}":                "8443",
			"${secret:team/json#nested}":              `{"a": 1}`,
			"${env:HOME}|${secret:team/json#api_key}": os.Getenv("HOME") + "|k-" + marker + "-9",
		} {
			got, err := r.Resolve(ctx, "header X", in)
			if err != nil || got != want {
				t.Errorf("%s: %q, %v; want %q", in, got, err, want)
			}
		}
		for in, want := range map[string]string{
			"${secret:team/json#missing}": `has no key "missing"`,
			"${secret:team/text#k}":       "does not hold a JSON object",
			"${secret:team/none}":         "reading secret team/none",
		} {
			_, err := r.Resolve(ctx, "header X", in)
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), marker) {
				t.Errorf("%s: err %v; want %q and no secret", in, err, want)
			}
		}
	})

	t.Run("cached for its lifetime", func(t *testing.T) {
		clk := &clock{t: time.Now()}
		r, c := newResolver(m, clk)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := r.Resolve(ctx, "h", "${secret:team/token}"); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if _, err := r.Resolve(ctx, "h", "${secret:team/token} ${secret:team/token}"); err != nil {
			t.Fatal(err)
		}
		if n := c.reads.Load(); n != 1 {
			t.Errorf("%d reads; want 1", n)
		}
		clk.Add(61 * time.Second)
		if _, err := r.Resolve(ctx, "h", "${secret:team/token}"); err != nil {
			t.Fatal(err)
		}
		if n := c.reads.Load(); n != 2 {
			t.Errorf("%d reads after it expired; want 2", n)
		}
	})

	t.Run("refresh", func(t *testing.T) {
		m.PutSecret(t, "team/rotating", "r-"+marker+"-1")
		r, c := newResolver(m, &clock{t: time.Now()})
		const v = "Bearer ${secret:team/rotating}"
		if got, _ := r.Resolve(ctx, "h", v); got != "Bearer r-"+marker+"-1" {
			t.Fatalf("resolved %q", got)
		}
		changed, err := r.Refresh(ctx, v)
		if err != nil || changed {
			t.Fatalf("unrotated: changed %v, %v", changed, err)
		}
		// Found unchanged: another refusal reads nothing.
		if changed, err := r.Refresh(ctx, v, "${env:HOME}"); err != nil || changed || c.reads.Load() != 2 {
			t.Fatalf("again: changed %v, %v, %d reads; want no read", changed, err, c.reads.Load())
		}
		m.Rotate(t, "team/rotating", "r-"+marker+"-2")
		// Confirmed until it expires: the rotation is seen at expiry, or
		// by a resolver that had not confirmed it yet.
		r2, _ := newResolver(m, &clock{t: time.Now()})
		if _, err := r2.Resolve(ctx, "h", "${secret:team/json#api_key}"); err != nil {
			t.Fatal(err)
		}
		m.Rotate(t, "team/json", `{"api_key": "k-`+marker+`-10"}`)
		changed, err = r2.Refresh(ctx, "X ${secret:team/json#api_key}")
		if err != nil || !changed {
			t.Fatalf("rotated: changed %v, %v", changed, err)
		}
		if got, _ := r2.Resolve(ctx, "h", "${secret:team/json#api_key}"); got != "k-"+marker+"-10" {
			t.Fatalf("after the rotation: %q", got)
		}
	})
}

// TestHeadersTransport: a request refused (401) with a header from a
// secret that was rotated since it was read is sent once more, body and
// all, with the new value, which is sent from then on; one refused for
// another reason costs one read of the secret, and then none.
func TestHeadersTransport(t *testing.T) {
	m := moto.Start(t)
	ctx := context.Background()
	m.PutSecret(t, "svc/key", "key-"+marker+"-1")
	var want atomic.Value
	want.Store("key-" + marker + "-1")
	var bodies []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if r.Header.Get("X-Api-Key") != want.Load().(string) {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	r, c := newResolver(m, &clock{t: time.Now()})
	var learned []string
	h := secretref.NewHeaders(r, map[string]string{"X-Api-Key": "${secret:svc/key}", "X-Plain": "p"}, func(_, v string) { learned = append(learned, v) })
	if _, err := h.Resolve(ctx); err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: h.Transport(tr)}
	post := func() (int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"n": 1}`))
		for k, v := range h.Current() {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post(); err != nil || code != 200 {
		t.Fatalf("before the rotation: %d %v", code, err)
	}
	m.Rotate(t, "svc/key", "key-"+marker+"-2")
	want.Store("key-" + marker + "-2")
	if code, err := post(); err != nil || code != 200 {
		t.Fatalf("after the rotation: %d %v", code, err)
	}
	if h.Current()["X-Api-Key"] != "key-"+marker+"-2" || !slices.Contains(learned, "key-"+marker+"-2") {
		t.Fatalf("current %v, learned %v", h.Current(), learned)
	}
	mu.Lock()
	if len(bodies) != 3 || bodies[2] != `{"n": 1}` {
		t.Errorf("bodies %q; want the refused request sent again whole", bodies)
	}
	mu.Unlock()
	reads := c.reads.Load()
	want.Store("a key nobody has")
	for range 3 {
		if code, err := post(); err != nil || code != 401 {
			t.Fatalf("refused: %d %v", code, err)
		}
	}
	if n := c.reads.Load() - reads; n != 1 {
		t.Errorf("%d reads for three refusals of an unrotated secret; want 1", n)
	}
}

// TestHeadersRefuseLineBreaks: a header whose resolved value holds a CR
// or LF (a secret, a file or an environment variable crafted to split the
// request and add headers of its own) is refused with an error naming the
// header, never quoting the value, and nothing is made Current or learned.
func TestHeadersRefuseLineBreaks(t *testing.T) {
	m := moto.Start(t)
	ctx := context.Background()
	m.PutSecret(t, "evil/crlf", "k-"+marker+"\r\nX-Injected: 1")
	m.PutSecret(t, "evil/json", `{"k": "k-`+marker+`\nX-Injected: 1"}`)
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	// Trailing line breaks are cut from a file; one inside is not.
	if err := os.WriteFile(file, []byte("k-"+marker+"\rX-Injected: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SECRETREF_CRLF", "k-"+marker+"\nX-Injected: 1")
	r, _ := newResolver(m, &clock{t: time.Now()})
	for _, v := range []string{"${secret:evil/crlf}", "Bearer ${secret:evil/json#k}", "${file:" + file + "}", "${env:SECRETREF_CRLF}"} {
		var learned []string
		h := secretref.NewHeaders(r, map[string]string{"X-Api-Key": v}, func(_, v string) { learned = append(learned, v) })
		_, err := h.Resolve(ctx)
		if err == nil || !strings.Contains(err.Error(), "header X-Api-Key") || !strings.Contains(err.Error(), "line break") || strings.Contains(err.Error(), marker) {
			t.Errorf("%s: err %v; want a line break refused, naming the header, quoting nothing", v, err)
		}
		if len(h.Current()) != 0 || len(learned) != 0 {
			t.Errorf("%s: current %v, learned %d values; want nothing", v, h.Current(), len(learned))
		}
	}
}
