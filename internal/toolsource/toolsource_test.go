package toolsource_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeKind is a kind whose servers answer as the test says: loads fail
// while fail is set, and each call echoes its arguments.
type fakeKind struct {
	eager bool
	mu    sync.Mutex
	srvs  map[string]*fakeServer
}

type fakeSpec struct {
	toolsource.Config
	Tools []string
}

func (k *fakeKind) Info() toolsource.KindInfo {
	return toolsource.KindInfo{Type: "fake", Noun: "fake server", Eager: k.eager}
}

func (k *fakeKind) Decode(entry *yaml.Node) (toolsource.Spec, error) {
	var f struct {
		toolsource.Fields `yaml:",inline"`
		Tools             []string `yaml:"tools"`
	}
	if err := toolsource.DecodeEntry(entry, &f); err != nil {
		return nil, err
	}
	c, err := f.Fields.Config()
	if err != nil {
		return nil, err
	}
	return fakeSpec{Config: c, Tools: f.Tools}, nil
}

func (k *fakeKind) Open(_ context.Context, spec toolsource.Spec, h *toolsource.Handle) (toolsource.Server, error) {
	s := &fakeServer{spec: spec.(fakeSpec), h: h}
	k.mu.Lock()
	if k.srvs == nil {
		k.srvs = map[string]*fakeServer{}
	}
	k.srvs[h.Name()] = s
	k.mu.Unlock()
	return s, nil
}

func (k *fakeKind) server(name string) *fakeServer {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.srvs[name]
}

type fakeServer struct {
	spec   fakeSpec
	h      *toolsource.Handle
	fail   atomic.Pointer[error]
	loads  atomic.Int32
	closed atomic.Bool
	// during, when set, runs inside the next Load, once.
	during atomic.Pointer[func()]
}

func (s *fakeServer) Load(context.Context) ([]toolsource.Tool, error) {
	s.loads.Add(1)
	if f := s.during.Swap(nil); f != nil {
		(*f)()
	}
	if p := s.fail.Load(); p != nil {
		return nil, *p
	}
	var out []toolsource.Tool
	for _, name := range s.spec.Tools {
		ro := !strings.HasPrefix(name, "delete")
		out = append(out, toolsource.Tool{Tool: catalog.Tool{Name: name,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
			Annotations: catalog.Annotations{ReadOnly: &ro}}, Ref: "ref:" + name})
	}
	return out, nil
}

func (s *fakeServer) Call(_ context.Context, c toolsource.Call) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"ref": c.Ref, "args": c.Args, "timeout": c.Timeout.String()})
}

func (s *fakeServer) Close() error { s.closed.Store(true); return nil }

func (s *fakeServer) failWith(err error) {
	if err == nil {
		s.fail.Store(nil)
		return
	}
	s.fail.Store(&err)
}

func spec(name string, tools ...string) fakeSpec {
	return fakeSpec{Config: toolsource.Config{Name: name, Type: "fake"}, Tools: tools}
}

func newSet(t *testing.T, k *fakeKind, specs ...toolsource.Spec) *toolsource.Set {
	t.Helper()
	s, err := toolsource.New(context.Background(), toolsource.NewRegistry(k), specs,
		toolsource.Env{Retry: toolsource.Retry{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond, Attempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tool(server, name string) catalog.Tool { return catalog.Tool{Server: server, Name: name} }

func TestCallChecks(t *testing.T) {
	k := &fakeKind{}
	sp := spec("pets", "get_pet", "delete_pet", "secret_op")
	sp.Deny = []string{"SECRET_*"}
	sp.RequireApproval = []string{"get_*"}
	s := newSet(t, k, sp)
	allowed := spec("free", "delete_all")
	allowed.AllowDestructive = true
	allowed.CallTimeout = 3 * time.Second
	s2 := newSet(t, &fakeKind{}, allowed)
	cases := []struct {
		name string
		set  *toolsource.Set
		tool catalog.Tool
		args string
		opt  execution.CallOptions
		code fault.Code
		want string
	}{
		{"listed", s, tool("pets", "get_pet"), `{"n":1}`, execution.CallOptions{}, "", `"ref":"ref:get_pet"`},
		{"default timeout", s, tool("pets", "get_pet"), `{}`, execution.CallOptions{}, "", `"timeout":"30s"`},
		{"missing", s, tool("pets", "nope"), `{}`, execution.CallOptions{}, fault.ToolNotFound, `fake server "pets" has no tool "nope"`},
		{"no server", s, tool("cats", "x"), `{}`, execution.CallOptions{}, fault.ToolNotFound, `no server named "cats"`},
		{"denied without regard to case", s, tool("pets", "secret_op"), `{}`, execution.CallOptions{}, fault.Forbidden, "not allowed by the configuration"},
		{"destructive, server refuses", s, tool("pets", "delete_pet"), `{}`, execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}}, fault.Forbidden, `server "pets" does not allow destructive tools`},
		{"bad arguments", s, tool("pets", "get_pet"), `{"n":"x"}`, execution.CallOptions{}, fault.InvalidArguments, ""},
		{"destructive, request refuses", s2, tool("free", "delete_all"), `{}`, execution.CallOptions{}, fault.Forbidden, "the request does not allow"},
		{"destructive, both allow", s2, tool("free", "delete_all"), `{}`, execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}}, "", `"timeout":"3s"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := c.set.Call(context.Background(), c.tool, json.RawMessage(c.args), c.opt)
			if c.code != "" {
				if fault.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("err = %v, want %s containing %q", err, c.code, c.want)
				}
				return
			}
			if err != nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("out = %s, %v; want %q", out, err, c.want)
			}
		})
	}
	tools, _ := s.Tools(context.Background())
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
		if tl.Name == "get_pet" && !tl.RequireApproval {
			t.Error("get_pet: require_approval not applied")
		}
	}
	if strings.Join(names, ",") != "delete_pet,get_pet" {
		t.Errorf("tools = %v, want the denied one hidden, sorted", names)
	}
}

func TestLifecycle(t *testing.T) {
	k := &fakeKind{}
	s := newSet(t, k, spec("a", "x"))
	ctx := context.Background()
	if _, err := s.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckServer("a"); err != nil {
		t.Fatalf("loaded server: %v", err)
	}
	srv := k.server("a")
	down := errors.New("connection refused")
	srv.failWith(down)
	srv.h.Lost(down)
	_, err := s.Call(ctx, tool("a", "x"), nil, execution.CallOptions{})
	fe := fault.As(err)
	if fe.Code != fault.Unavailable || !fe.Retryable || !strings.Contains(fe.Message, `fake server "a" is unavailable`) {
		t.Fatalf("lost server: %v (retryable %v)", err, fe.Retryable)
	}
	tools, _ := s.Tools(ctx)
	if len(tools) != 1 {
		t.Fatalf("a lost server keeps its last tools, got %v", tools)
	}
	if h := s.Health()[0]; h.State != toolsource.StateUnavailable || h.Tools != 1 || h.Transport != "fake" {
		t.Fatalf("health = %+v", h)
	}
	waitFor(t, func() bool { return srv.loads.Load() >= 4 }) // the first, then a round of three
	srv.failWith(nil)
	if err := s.CheckServer("a"); fault.CodeOf(err) != fault.Unavailable {
		t.Fatalf("CheckServer of a down server = %v", err)
	}
	// The round is over: demand starts another, which succeeds.
	waitFor(t, func() bool { return s.CheckServer("a") == nil })
	if h := s.Health()[0]; h.State != toolsource.StateHealthy {
		t.Fatalf("recovered health = %+v", h)
	}
	srv.h.Degraded(errors.New("refresh failed"))
	if h := s.Health()[0]; h.State != toolsource.StateDegraded || h.LastError != "refresh failed" {
		t.Fatalf("degraded health = %+v", h)
	}
	srv.h.Update([]toolsource.Tool{{Tool: catalog.Tool{Name: "y"}}})
	tools, _ = s.Tools(ctx)
	if len(tools) != 1 || tools[0].Name != "y" || s.Health()[0].State != toolsource.StateHealthy {
		t.Fatalf("after Update: %v, %+v", tools, s.Health()[0])
	}
	s.Close()
	if !srv.closed.Load() {
		t.Fatal("Close did not close the server")
	}
	if _, err := s.Tools(ctx); fault.CodeOf(err) != fault.Unavailable {
		t.Fatalf("Tools after Close: %v", err)
	}
}

// TestLoadYieldsToTheServer: what a server says while a load runs is
// newer than what that load lists. A Lost (the connection the load made
// dropped at once) keeps the server unavailable and loads it again; an
// Update (its list changed at once) is the catalog that stands.
func TestLoadYieldsToTheServer(t *testing.T) {
	ctx := context.Background()
	t.Run("lost", func(t *testing.T) {
		k := &fakeKind{}
		s := newSet(t, k, spec("a", "x"))
		if _, err := s.Tools(ctx); err != nil {
			t.Fatal(err)
		}
		srv := k.server("a")
		gone := errors.New("connection reset")
		lostAgain := func() { srv.h.Lost(gone) }
		srv.during.Store(&lostAgain)
		srv.h.Lost(errors.New("connection refused"))
		// The load that the first Lost started made a connection that
		// was lost before it returned: another load follows.
		waitFor(t, func() bool { return srv.loads.Load() >= 3 && s.CheckServer("a") == nil })
		if h := s.Health()[0]; h.State != toolsource.StateHealthy {
			t.Fatalf("health = %+v", h)
		}
	})
	t.Run("updated", func(t *testing.T) {
		k := &fakeKind{}
		s := newSet(t, k, spec("a", "x"))
		if _, err := s.Tools(ctx); err != nil {
			t.Fatal(err)
		}
		srv := k.server("a")
		loaded := make(chan struct{})
		update := func() {
			srv.h.Update([]toolsource.Tool{{Tool: catalog.Tool{Name: "y"}}})
			if h := s.Health()[0]; h.State != toolsource.StateUnavailable {
				t.Errorf("an Update during a load made the server %s", h.State)
			}
			close(loaded)
		}
		srv.during.Store(&update)
		srv.h.Lost(errors.New("connection refused"))
		<-loaded
		waitFor(t, func() bool { return s.CheckServer("a") == nil })
		tools, _ := s.Tools(ctx)
		if len(tools) != 1 || tools[0].Name != "y" {
			t.Fatalf("tools = %v; want the Update's", tools)
		}
	})
}

func TestPermanent(t *testing.T) {
	refused := toolsource.Permanent(errors.New("not an OpenAPI document"))
	t.Run("eager kind fails New", func(t *testing.T) {
		k := &fakeKind{eager: true}
		k.srvs = map[string]*fakeServer{}
		reg := toolsource.NewRegistry(&failingKind{fakeKind: k, err: refused})
		_, err := toolsource.New(context.Background(), reg, []toolsource.Spec{spec("doc", "x")}, toolsource.Env{})
		if fault.CodeOf(err) != fault.InvalidRequest || !strings.Contains(err.Error(), "not an OpenAPI document") {
			t.Fatalf("New = %v", err)
		}
	})
	t.Run("lazy kind is unavailable, not retryable", func(t *testing.T) {
		k := &failingKind{fakeKind: &fakeKind{}, err: refused}
		s, err := toolsource.New(context.Background(), toolsource.NewRegistry(k), []toolsource.Spec{spec("doc", "x")}, toolsource.Env{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.Call(context.Background(), tool("doc", "x"), nil, execution.CallOptions{})
		fe := fault.As(err)
		if fe.Code != fault.Unavailable || fe.Retryable || fe.Message != "not an OpenAPI document" {
			t.Fatalf("call = %+v", fe)
		}
	})
}

// failingKind opens servers whose loads fail with err.
type failingKind struct {
	*fakeKind
	err error
}

func (k *failingKind) Open(ctx context.Context, spec toolsource.Spec, h *toolsource.Handle) (toolsource.Server, error) {
	srv, _ := k.fakeKind.Open(ctx, spec, h)
	srv.(*fakeServer).failWith(k.err)
	return srv, nil
}

func TestNewRefuses(t *testing.T) {
	k := &fakeKind{}
	reg := toolsource.NewRegistry(k)
	cases := []struct {
		name  string
		specs []toolsource.Spec
		want  string
	}{
		{"unknown kind", []toolsource.Spec{fakeSpec{Config: toolsource.Config{Name: "a", Type: "grpc"}}}, `unknown type "grpc" (want fake)`},
		{"bad name", []toolsource.Spec{spec("then")}, "server name"},
		{"twice", []toolsource.Spec{spec("a"), spec("a")}, `two servers are named "a"`},
		{"bad header", []toolsource.Spec{fakeSpec{Config: toolsource.Config{Name: "a", Type: "fake", Headers: map[string]string{"X Y": "1"}}}}, "invalid header name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := toolsource.New(context.Background(), reg, c.specs, toolsource.Env{})
			if fault.CodeOf(err) != fault.InvalidRequest || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestDecodeEntry(t *testing.T) {
	k := &fakeKind{}
	cases := []struct {
		doc, want string
	}{
		{"name: a\ntype: fake\ntools: [x]\ncall_timeout: 2s\nheaders: {Authorization: '${env:T}'}\n", ""},
		{"name: a\ntype: fake\ntools: [x]\nallow_destructiv: true\n", `line 4: unknown field "allow_destructiv"`},
		{"name: a\ntools: 3\n", "line 2: a number (3) where a list belongs"},
		{"name: a\ncall_timeout: soon\n", `server "a": call_timeout`},
		{"- a\n", "line 1: want an object"},
	}
	for _, c := range cases {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(c.doc), &n); err != nil {
			t.Fatal(err)
		}
		sp, err := k.Decode(n.Content[0])
		if c.want == "" {
			if err != nil || sp.Base().CallTimeout != 2*time.Second {
				t.Errorf("%q: %v %+v", c.doc, err, sp)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.doc, err, c.want)
		}
	}
}

func TestRetryOrDefault(t *testing.T) {
	got := toolsource.Retry{Initial: 2 * time.Second}.OrDefault()
	if got.Initial != 2*time.Second || got.Max != toolsource.DefaultRetry.Max || got.Attempts != toolsource.DefaultRetry.Attempts {
		t.Fatalf("OrDefault = %+v", got)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
