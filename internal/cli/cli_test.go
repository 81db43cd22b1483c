package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/cli"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

type output struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code string `json:"code"`
	} `json:"error"`
	Calls []struct {
		Server, Tool string
		OK           bool
		Version      int `json:"version"`
	} `json:"calls"`
	ExecutionID string  `json:"execution_id"`
	DurationMS  float64 `json:"duration_ms"`
}

func pml(t *testing.T, args ...string) (int, output, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if len(args) > 1 {
		args = append([]string{args[0], "--cache-dir", cacheDir}, args[1:]...)
	}
	code := cli.Main(context.Background(), args, &out, &errOut)
	var o output
	if out.Len() > 0 && strings.HasPrefix(strings.TrimSpace(out.String()), "{") {
		if err := json.Unmarshal(out.Bytes(), &o); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
		}
	}
	return code, o, errOut.String()
}

var cacheDir = filepath.Join(os.TempDir(), "pml-cli-test-cache")

// TestMain starts from an environment without pml's variables (a
// developer's own PML_MCP_SERVERS must not change what the tests see) and
// keeps the commands' traces and capabilities out of the user's data
// directory.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pml-cli-test")
	if err != nil {
		panic(err)
	}
	for _, k := range app.EnvVars {
		os.Unsetenv(k)
	}
	os.Setenv(app.EnvTracesFile, filepath.Join(dir, "traces.jsonl"))
	os.Setenv(app.EnvCapFile, filepath.Join(dir, "capabilities.json"))
	os.Setenv(app.EnvSuspDir, filepath.Join(dir, "suspensions"))
	os.Setenv(app.EnvMCPCredsDir, filepath.Join(dir, "mcp-credentials"))
	code := m.Run()
	dynamolocal.StopAll()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestRun(t *testing.T) {
	script := filepath.Join(t.TempDir(), "s.js")
	if err := os.WriteFile(script, []byte("return args.n * 2"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Valid JavaScript too, with another meaning: only the .ts decides.
	tsScript := filepath.Join(t.TempDir(), "s.ts")
	if err := os.WriteFile(tsScript, []byte("const id = (x) => x;\nreturn id<number>(args.n)"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		exit   int
		result string
		code   string
		calls  int
	}{
		{"issue example", []string{"run", "-e", "return await Promise.all([mcp.demo.echo({x:1}), mcp.demo.add({a:2,b:3})])"}, 0, `[{"x":1},5]`, "", 2},
		{"file with args", []string{"run", "--args", `{"n": 21}`, script}, 0, `42`, "", 0},
		{"script error exits 1", []string{"run", "-e", "throw new Error('x')"}, 1, "", "SCRIPT_ERROR", 0},
		{"tool error exits 1", []string{"run", "-e", "await mcp.demo.fail({})"}, 1, "", "TOOL_ERROR", 1},
		{"one demo: store and text tools in process", []string{"run", "-e", "await mcp.demo.kv_set({key: 'n', value: 41}); return (await mcp.demo.kv_get({key: 'n'})).value + (await mcp.demo.word_count({text: 'a'})).words"}, 0, `42`, "", 3},
		{"one demo: one sleep", []string{"run", "-e", "return await mcp.demo.sleep({ms: 1})"}, 0, `{"slept_ms":1}`, "", 1},
		{"timeout exits 1", []string{"run", "--timeout", "100ms", "-e", "while (true) {}"}, 1, "", "TIMEOUT", 0},
		{"narrowed tool set", []string{"run", "--tools", "demo:echo", "-e", "return await mcp.demo.add({a:1,b:2})"}, 1, "", "TOOL_NOT_FOUND", 0},
		{"nothing to run", []string{"run"}, 2, "", "", 0},
		{"both -e and file", []string{"run", "-e", "1", script}, 2, "", "", 0},
		{"bad args JSON", []string{"run", "--args", "{", "-e", "return 1"}, 2, "", "", 0},
		{"missing file", []string{"run", "/nonexistent.js"}, 2, "", "", 0},
		{"unknown flag", []string{"run", "--nope", "-e", "1"}, 2, "", "", 0},
		{"unknown command", []string{"frobnicate"}, 2, "", "", 0},
		{"bad --mcp", []string{"run", "--mcp", "noequals", "-e", "return 1"}, 2, "", "", 0},
		{"TypeScript", []string{"run", "-e", "const n: number = 41; return n + 1"}, 0, `42`, "", 0},
		{"a .ts file is TypeScript", []string{"run", "--args", `{"n": 42}`, tsScript}, 0, `42`, "", 0},
		{"the same as JavaScript", []string{"run", "--lang", "js", "--args", `{"n": 42}`, tsScript}, 1, "", "SCRIPT_ERROR", 0},
		{"flags after the file", []string{"run", script, "--args", `{"n": 21}`, "--timeout", "5s"}, 0, `42`, "", 0},
		{"call summary", []string{"run", "--call-detail", "summary", "-e", "return await mcp.demo.add({a:2,b:3})"}, 0, `5`, "", 0},
		{"bad --lang", []string{"run", "--lang", "py", "-e", "return 1"}, 2, "", "", 0},
		{"bad --call-detail", []string{"run", "--call-detail", "all", "-e", "return 1"}, 2, "", "", 0},
		{"-- ends the flags", []string{"run", "--", "--args"}, 2, "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exit, o, stderr := pml(t, tt.args...)
			if exit != tt.exit {
				t.Fatalf("exit %d, want %d; stderr: %s", exit, tt.exit, stderr)
			}
			if tt.result != "" {
				var g, w any
				_ = json.Unmarshal(o.Result, &g)
				_ = json.Unmarshal([]byte(tt.result), &w)
				gb, _ := json.Marshal(g)
				wb, _ := json.Marshal(w)
				if !o.OK || string(gb) != string(wb) {
					t.Fatalf("result %s, want %s", o.Result, tt.result)
				}
				if o.ExecutionID == "" || o.DurationMS <= 0 {
					t.Fatalf("missing execution id or duration: %+v", o)
				}
			}
			if tt.code != "" && (o.Error == nil || o.Error.Code != tt.code) {
				t.Fatalf("error %+v, want %s", o.Error, tt.code)
			}
			if tt.exit != 2 && len(o.Calls) != tt.calls {
				t.Fatalf("calls %+v, want %d", o.Calls, tt.calls)
			}
			if tt.exit == 2 && stderr == "" {
				t.Fatal("a usage error must say what is wrong on stderr")
			}
		})
	}
}

func TestCapabilityAndTraceCommands(t *testing.T) {
	script := filepath.Join(t.TempDir(), "sum.js")
	if err := os.WriteFile(script, []byte("return args.xs.reduce((a, b) => a + b, 0)"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := cli.Main(context.Background(), []string{"capability", "save", "math:sum", script, "--description", "sum"}, &out, &errOut); code != 0 {
		t.Fatalf("save: %d %s", code, errOut.String())
	}
	exit, o, stderr := pml(t, "run", "-e", "return await mcp.math.sum({xs: [1, 2, 3]})")
	if exit != 0 || string(o.Result) != "6" || len(o.Calls) != 1 {
		t.Fatalf("run: %d %+v %s", exit, o, stderr)
	}
	out.Reset()
	if code := cli.Main(context.Background(), []string{"trace", o.ExecutionID}, &out, &errOut); code != 0 || !strings.Contains(out.String(), `"tool": "sum"`) {
		t.Fatalf("trace: %d %s %s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := cli.Main(context.Background(), []string{"trace", o.ExecutionID, "--store", "file"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), `"tool": "sum"`) {
		t.Fatalf("trace with a flag after the id: %d %s %s", code, out.String(), errOut.String())
	}
	if code := cli.Main(context.Background(), []string{"trace", "ex_nope"}, &out, &errOut); code != cli.ExitFailed {
		t.Fatalf("trace of an unknown id exits %d; it is no usage error", code)
	}
	if code := cli.Main(context.Background(), []string{"capability", "save", "bad", script}, &out, &errOut); code != 2 {
		t.Fatalf("saving a bad name exits %d", code)
	}
}

// TestCapabilityDraftsLocally: under the deployed policy
// (PML_CALLER_DECIDES=off) pml capability save keeps a draft (exit 3),
// which pml capability publish publishes where the caller decides; a run
// pinned to version 1 keeps it once version 2 is published.
func TestCapabilityDraftsLocally(t *testing.T) {
	t.Setenv(app.EnvCapFile, filepath.Join(t.TempDir(), "capabilities.json"))
	dir := t.TempDir()
	write := func(name, code string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(code), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	main := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(context.Background(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := main("capability", "save", "loc:mul", write("v1.js", "return 1"), "--provenance", "ex_1,ex_2"); code != 0 || !strings.Contains(out, `"status": "published"`) {
		t.Fatalf("save under the local default: %d %s %s", code, out, errOut)
	}

	t.Setenv(app.EnvCallerDecides, "off")
	code, out, errOut := main("capability", "save", "loc:mul", write("v2.js", "return 2"))
	if code != cli.ExitSuspended || !strings.Contains(out, `"status": "draft"`) || !strings.Contains(errOut, "pml capability publish") {
		t.Fatalf("save under the deployed policy: %d %s %s", code, out, errOut)
	}
	var o struct {
		Draft struct {
			ID string `json:"id"`
		} `json:"draft"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.Draft.ID == "" {
		t.Fatalf("%s: %v", out, err)
	}
	if code, out, _ := main("capability", "drafts"); code != 0 || !strings.Contains(out, o.Draft.ID) || strings.Contains(out, "return 2") || strings.Contains(out, `"code"`) {
		t.Fatalf("drafts: %d %s", code, out)
	}
	if code, out, _ := main("capability", "drafts", o.Draft.ID); code != 0 || !strings.Contains(out, "return 2") {
		t.Fatalf("drafts ID: %d %s", code, out)
	}
	if code, _, errOut := main("capability", "publish", o.Draft.ID); code != cli.ExitFailed || !strings.Contains(errOut, "FORBIDDEN") {
		t.Fatalf("publish under the deployed policy: %d %s", code, errOut)
	}
	if code, out, errOut := main("capability", "publish", o.Draft.ID, "--caller-decides", "on"); code != 0 || !strings.Contains(out, `"version": 2`) {
		t.Fatalf("publish where the caller decides: %d %s %s", code, out, errOut)
	}
	// A list says what exists, without the code ("show" gives it): no
	// "code" key at all, never an empty one.
	if code, out, _ := main("capability", "list"); code != 0 || !strings.Contains(out, `"loc:mul"`) || strings.Contains(out, `"code"`) {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out, _ := main("capability", "show", "loc:mul@1"); code != 0 || !strings.Contains(out, `"ex_2"`) || !strings.Contains(out, `"code_hash": "sha256:`) {
		t.Fatalf("show version 1: %d %s", code, out)
	}
	exit, r, stderr := pml(t, "run", "--pin", "loc:mul@1", "-e", "return await mcp.loc.mul({})")
	if exit != 0 || string(r.Result) != "1" || r.Calls[0].Version != 1 {
		t.Fatalf("pinned run: %d %+v %s", exit, r, stderr)
	}
	if exit, r, _ := pml(t, "run", "-e", "return await mcp.loc.mul({})"); exit != 0 || string(r.Result) != "2" {
		t.Fatalf("unpinned run: %d %+v", exit, r)
	}
	if exit, _, _ := pml(t, "run", "--pin", "loc:mul", "-e", "return 1"); exit != cli.ExitUsage {
		t.Fatalf("--pin without a version exits %d", exit)
	}
}

func TestRunAgainstMCPServer(t *testing.T) {
	ds, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	for _, url := range []string{ds.SSEURL(), ds.StreamableURL()} {
		exit, o, stderr := pml(t, "run", "--mcp", "demo="+url, "-e", "return (await mcp.demo.word_count({text: 'a b c'})).words")
		if exit != 0 || string(o.Result) != "3" || len(o.Calls) != 1 || !o.Calls[0].OK || o.Calls[0].Server != "demo" {
			t.Fatalf("%s: exit %d, %+v, %s", url, exit, o, stderr)
		}
	}
	var out, errOut bytes.Buffer
	if code := cli.Main(context.Background(), []string{"tools", "--mcp", "demo=" + ds.StreamableURL(), "--dts"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "word_count(args: {") {
		t.Fatalf("pml tools --dts: %d %s %s", code, out.String(), errOut.String())
	}
	// One server's declarations, and a search's: only what they name.
	for _, tc := range []struct {
		args        []string
		has, hasNot string
	}{
		{[]string{"--server", "demo"}, "word_count(args: {", ""},
		{[]string{"--server", "other"}, "declare const mcp: {}", "word_count"},
		{[]string{"--search", "count the words"}, "word_count(args: {", "add(args"},
	} {
		out.Reset()
		args := append([]string{"tools", "--mcp", "demo=" + ds.StreamableURL(), "--dts"}, tc.args...)
		if code := cli.Main(context.Background(), args, &out, &errOut); code != 0 || !strings.Contains(out.String(), tc.has) ||
			(tc.hasNot != "" && strings.Contains(out.String(), tc.hasNot)) {
			t.Fatalf("pml %v: %d %s %s", args, code, out.String(), errOut.String())
		}
	}
}

// serving is a `pml serve` running in the background on Main.
type serving struct {
	base   string // from the banner; "" when serve returned before listening
	cancel context.CancelFunc
	done   chan int // Main's exit code
	stderr *bannerWriter
}

// bannerWriter collects stderr and reports the URL of the banner's
// "listening on" line once, so tests wait for the listener, not a clock.
type bannerWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan string
	sent  bool
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

func (b *bannerWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if m := listeningRE.FindSubmatch(b.buf.Bytes()); m != nil && !b.sent {
		b.sent = true
		b.ready <- string(m[1])
	}
	return n, err
}

func (b *bannerWriter) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serve starts `pml serve ARGS` and returns once it listens or has exited.
func serve(t *testing.T, args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{cancel: cancel, done: make(chan int, 1), stderr: &bannerWriter{ready: make(chan string, 1)}}
	args = append([]string{"serve", "--cache-dir", cacheDir, "--no-demo-server"}, args...)
	go func() { s.done <- cli.Main(ctx, args, io.Discard, s.stderr) }()
	select {
	case s.base = <-s.stderr.ready:
		t.Cleanup(func() {
			cancel()
			<-s.done
		})
	case code := <-s.done:
		cancel()
		s.done <- code
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("pml serve neither listened nor exited: %s", s.stderr)
	}
	return s
}

// stop cancels serve's context, as SIGTERM does, and returns its exit
// code; it fails the test if serve takes longer than a prompt shutdown.
func (s *serving) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.done:
		s.done <- code // for the cleanup
		return code
	case <-time.After(5 * time.Second):
		t.Fatalf("pml serve did not stop promptly: %s", s.stderr)
		return -1
	}
}

// get sends method path with the given headers ("Host" sets the Host).
func get(t *testing.T, method, url string, kv ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "Host" {
			req.Host = kv[i+1]
		}
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestServeNeedsTokenBeyondLoopback: listening where the network can reach
// the server without a token is refused before anything is served.
func TestServeNeedsTokenBeyondLoopback(t *testing.T) {
	t.Setenv(app.EnvServeToken, "")
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		t.Run(addr, func(t *testing.T) {
			s := serve(t, "--addr", addr)
			if s.base != "" {
				code := s.stop(t)
				t.Fatalf("serve listened on %s without a token (exit %d)", s.base, code)
			}
			if code := <-s.done; code != cli.ExitUsage || !strings.Contains(s.stderr.String(), "--token") {
				t.Fatalf("exit %d, stderr %s", code, s.stderr)
			}
		})
	}
}

// TestServeGuarded: with a token (here from the environment) serve
// listens on every interface, and every route but /healthz needs it.
func TestServeGuarded(t *testing.T) {
	t.Setenv(app.EnvServeToken, "env-token")
	s := serve(t, "--addr", "0.0.0.0:0", "--allowed-host", "pml.test", "--allowed-origin", "https://app.test")
	if s.base == "" {
		t.Fatalf("serve did not start: %d %s", <-s.done, s.stderr)
	}
	bearer := "Bearer env-token"
	tests := []struct {
		name   string
		method string
		path   string
		kv     []string
		status int
	}{
		{"no token", "GET", "/tools", nil, 401},
		{"token", "GET", "/tools", []string{"Authorization", bearer}, 200},
		{"healthz without token", "GET", "/healthz", nil, 200},
		{"rebinding Host", "GET", "/tools", []string{"Authorization", bearer, "Host", "evil.example"}, 403},
		{"allowed host", "GET", "/tools", []string{"Authorization", bearer, "Host", "pml.test"}, 200},
		{"cross-site Origin", "GET", "/tools", []string{"Authorization", bearer, "Origin", "https://evil.example"}, 403},
		{"allowed origin", "GET", "/tools", []string{"Authorization", bearer, "Origin", "https://app.test"}, 200},
		{"GET /mcp", "GET", "/mcp", []string{"Authorization", bearer, "Accept", "text/event-stream"}, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, tt.method, s.base+tt.path, tt.kv...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
		})
	}
	if _, body := get(t, "GET", s.base+"/healthz", "Authorization", bearer); !strings.Contains(body, `"details":{"mcp_servers":[]}`) {
		t.Errorf("/healthz without servers: %s; want an empty list of servers, as on Lambda", body)
	}
	if _, body := get(t, "GET", s.base+"/healthz"); strings.TrimSpace(body) != `{"ok":true}` {
		t.Errorf("/healthz without the token: %s; want only that the server is up", body)
	}
	if !strings.Contains(s.stderr.String(), "Authorization: Bearer $"+app.EnvServeToken) || strings.Contains(s.stderr.String(), "env-token") {
		t.Fatalf("the banner must show how to send the token, never the token: %s", s.stderr)
	}
	if code := s.stop(t); code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, s.stderr)
	}
}

// TestServeStopsWithMCPGetOpen: a client's GET /mcp (Claude Code sends one
// after initializing) must not hold serve open past SIGTERM.
func TestServeStopsWithMCPGetOpen(t *testing.T) {
	t.Setenv(app.EnvServeToken, "")
	s := serve(t, "--addr", "127.0.0.1:0")
	if s.base == "" {
		t.Fatalf("serve did not start: %d %s", <-s.done, s.stderr)
	}
	if !strings.Contains(s.stderr.String(), "-H 'Content-Type: application/json'") {
		t.Fatalf("the banner's curl example must send JSON: %s", s.stderr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // left open until serve has stopped, as a client holding the stream would
	code := s.stop(t)
	if code != cli.ExitOK || !strings.Contains(s.stderr.String(), "pml serve: stopped") {
		t.Fatalf("exit %d (GET /mcp answered %d): %s", code, resp.StatusCode, s.stderr)
	}
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /mcp answered %d, want 405", resp.StatusCode)
	}
}

// TestServeOffersTheDemoTools: the demo MCP server pml serve starts offers
// the one demo tool set, the tools pml run offers in process included.
func TestServeOffersTheDemoTools(t *testing.T) {
	t.Setenv(app.EnvServeToken, "")
	s := serve(t, "--addr", "127.0.0.1:0", "--no-demo-server=false")
	if s.base == "" {
		t.Fatalf("serve did not start: %d %s", <-s.done, s.stderr)
	}
	code := `await mcp.demo.kv_set({key: "n", value: 1});
const failed = await mcp.demo.fail({message: "no"}).catch(e => e.code);
return [await mcp.demo.echo({x: 1}), await mcp.demo.add({a: 2, b: 3}), (await mcp.demo.kv_get({key: "n"})).value, failed, await mcp.demo.sleep({ms: 1})]`
	body, _ := json.Marshal(map[string]string{"code": code})
	resp, err := http.Post(s.base+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o output
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	if !o.OK || string(o.Result) != `[{"x":1},5,1,"TOOL_ERROR",{"slept_ms":1}]` {
		t.Fatalf("got %s %+v", o.Result, o.Error)
	}
}

// TestRunReadsMCPServersFromEnv: pml reads PML_MCP_SERVERS as the Lambda
// functions do; --config and --mcp add to it, a flag winning a name.
func TestRunReadsMCPServersFromEnv(t *testing.T) {
	ds, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	words := "return (await mcp.kv.word_count({text: 'a b'})).words"
	tests := []struct {
		name string
		env  string
		args []string
		exit int
		want string // result
		code string // else the error code
	}{
		{"servers from the environment", `{"servers": [{"name": "kv", "url": "` + ds.StreamableURL() + `"}]}`, []string{"-e", words}, 0, "2", ""},
		{"no in-process demo beside them", `{"servers": [{"name": "kv", "url": "` + ds.StreamableURL() + `"}]}`, []string{"-e", "return await mcp.demo.echo({})"}, 1, "", "TOOL_NOT_FOUND"},
		{"--mcp wins a name", `{"servers": [{"name": "kv", "url": "http://127.0.0.1:1/mcp"}]}`, []string{"--mcp", "kv=" + ds.SSEURL(), "-e", words}, 0, "2", ""},
		{"malformed", `{"servers": [`, []string{"-e", "return 1"}, 2, "", ""},
		{"a server named then", `{"servers": [{"name": "then", "url": "` + ds.StreamableURL() + `"}]}`, []string{"-e", "return 1"}, 2, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(app.EnvMCPServers, tt.env)
			exit, o, stderr := pml(t, append([]string{"run"}, tt.args...)...)
			if exit != tt.exit {
				t.Fatalf("exit %d, want %d: %s", exit, tt.exit, stderr)
			}
			if tt.want != "" && string(o.Result) != tt.want {
				t.Fatalf("result %s, want %s: %+v", o.Result, tt.want, o.Error)
			}
			if tt.code != "" && (o.Error == nil || o.Error.Code != tt.code) {
				t.Fatalf("error %+v, want %s", o.Error, tt.code)
			}
		})
	}
}

// TestExitCodes: 2 is for usage errors alone; anything else that fails is 1.
func TestExitCodes(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name string
		args []string
		exit int
	}{
		{"unknown trace", []string{"trace", "ex_nope"}, cli.ExitFailed},
		{"unknown capability", []string{"capability", "show", "nope:nope"}, cli.ExitFailed},
		{"serve on a busy address", []string{"serve", "--no-demo-server", "--addr", busy.Addr().String()}, cli.ExitFailed},
		{"demo-server on a busy address", []string{"demo-server", "--addr", busy.Addr().String()}, cli.ExitFailed},
		{"bad capability version", []string{"capability", "show", "a:b@x"}, cli.ExitUsage},
		{"bad --demo", []string{"run", "--demo", "maybe", "-e", "return 1"}, cli.ExitUsage},
		{"bad --store", []string{"run", "--store", "tape", "-e", "return 1"}, cli.ExitUsage},
		{"dynamodb without a table", []string{"trace", "--store", "dynamodb", "ex_x"}, cli.ExitUsage},
		{"trace without an id", []string{"trace"}, cli.ExitUsage},
		{"flags after the id", []string{"trace", "ex_nope", "--store", "file"}, cli.ExitFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := cli.Main(context.Background(), tt.args, &out, &errOut); code != tt.exit {
				t.Fatalf("exit %d, want %d: %s", code, tt.exit, errOut.String())
			}
			if errOut.Len() == 0 {
				t.Fatal("a failure must say what went wrong on stderr")
			}
		})
	}
}
