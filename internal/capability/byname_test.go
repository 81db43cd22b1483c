package capability_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// proc is one process's wiring over a registry (as internal/app builds
// it): its own index, counter and version cache, capability runs in
// process on its own service.
type proc struct {
	svc *executor.Service
	src *capability.Source
}

func newProc(t testing.TB, reg capability.Registry, interval time.Duration) *proc {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	reg = capability.Cached(reg, 0)
	runner := &capability.Runner{Registry: reg}
	src := capability.NewSourceWith(reg, runner, capability.SourceOptions{Logger: log,
		Index:   capability.NewIndex(reg, capability.IndexOptions{Interval: interval, Logger: log}),
		Counter: capability.NewCounter(reg, time.Hour, log)})
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}, src}, Logger: log})
	runner.Executor = svc
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return &proc{svc: svc, src: src}
}

func (p *proc) run(code string) *execution.Response {
	return p.svc.Execute(context.Background(), execution.Request{Code: code, TimeoutMS: 20000})
}

// opCounter counts the HTTP requests a DynamoDB client sends, by
// operation: round trips, retries included.
type opCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *opCounter) Do(r *http.Request) (*http.Response, error) {
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
	return http.DefaultClient.Do(r)
}

// take returns the counts since the last take.
func (c *opCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

// countedTable is a capabilities table in DynamoDB Local with a client
// whose requests are counted.
func countedTable(t testing.TB) (*dynamodb.Client, string, *opCounter) {
	t.Helper()
	inst := dynamolocal.Start(t)
	table := dynamolocal.TableName(t)
	if err := capability.CreateTable(context.Background(), inst.Client(), table); err != nil {
		t.Fatal(err)
	}
	counter := &opCounter{n: map[string]int{}}
	db := dynamodb.NewFromConfig(inst.Config(), func(o *dynamodb.Options) {
		o.DisableValidateResponseChecksum = true
		o.HTTPClient = counter
	})
	return db, table, counter
}

// TestDynamoDBRequestsPerExecution counts what an execution costs
// DynamoDB Local, with 200 capabilities saved (and old versions of some):
// nothing for code that names no capability, one BatchGetItem for one
// capability call (the run reads the version it was given from the
// process's cache), nothing else on the way — no Scan, no Query, no count
// written per call.
func TestDynamoDBRequestsPerExecution(t *testing.T) {
	ctx := context.Background()
	db, table, counter := countedTable(t)
	reg := capability.NewDynamoRegistry(db, table)
	for i := range 200 {
		if _, err := reg.Save(ctx, capability.Capability{Name: fmt.Sprintf("fill%d:x%d", i%20, i), Code: "return 1", Description: "filler"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, code := range []string{"return 0", "return args.xs.reduce((a, b) => a + b, 0)"} {
		if _, err := reg.Save(ctx, capability.Capability{Name: "math:sum", Code: code}, nil); err != nil {
			t.Fatal(err)
		}
	}
	p := newProc(t, reg, time.Hour)
	counter.take()

	tests := []struct {
		name, code, want string
		ops              map[string]int
	}{
		{"return 1", "return 1", "1", map[string]int{}},
		{"MCP tools only", "return await mcp.demo.add({a: 1, b: 2})", "3", map[string]int{}},
		{"one capability call", "return await mcp.math.sum({xs: [1, 2, 3]})", "6", map[string]int{"BatchGetItem": 1}},
		{"three calls of it", "let s = 0; for (let i = 0; i < 3; i++) s += await mcp.math.sum({xs: [i]}); return s", "3", map[string]int{"BatchGetItem": 1}},
		{"two capabilities", "return [await mcp.math.sum({xs: [1]}), await mcp.fill3.x3({})]", "[1,1]", map[string]int{"BatchGetItem": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for round := range 2 { // the first run warms what a process keeps; the second must cost the same
				r := p.run(tt.code)
				if tt.want != "" && (!r.OK || string(r.Result) != tt.want) {
					t.Fatalf("%s %+v", r.Result, r.Error)
				}
				if got := counter.take(); !mapsEqual(got, tt.ops) {
					t.Fatalf("round %d: DynamoDB requests %v; want %v", round+1, got, tt.ops)
				}
			}
		})
	}
	t.Run("discovery reads the index once per interval", func(t *testing.T) {
		for range 3 {
			r := p.run(`return (await tools.search("filler", 500)).length`)
			if !r.OK || string(r.Result) != "200" {
				t.Fatalf("%s %+v", r.Result, r.Error)
			}
		}
		if got := counter.take(); !mapsEqual(got, map[string]int{"Query": 1}) {
			t.Fatalf("three searches cost %v; want one Query of the index", got)
		}
	})
	t.Run("a name that is no capability", func(t *testing.T) {
		// One look-up; the suggestions come from the index, loaded above.
		r := p.run("return await mcp.math.sun({})")
		if r.OK || r.Error.Code != fault.ToolNotFound || !strings.Contains(r.Error.Message, "mcp.math.sum") {
			t.Fatalf("%+v", r.Error)
		}
		if got := counter.take(); !mapsEqual(got, map[string]int{"BatchGetItem": 1}) {
			t.Fatalf("DynamoDB requests %v; want one BatchGetItem", got)
		}
	})
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// twoProcesses runs f with two processes' wirings over one registry
// (writer and reader registry values on the same file or table), the
// reader's index over DynamoDB refreshed every interval.
func twoProcesses(t *testing.T, interval time.Duration, f func(t *testing.T, writer capability.Registry, reader *proc)) {
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "caps.json")
		// The file registry's index checks the file on every read (its
		// default interval).
		f(t, capability.NewFileRegistry(path), newProc(t, capability.NewFileRegistry(path), 0))
	})
	t.Run("dynamodb", func(t *testing.T) {
		db, table := newTable(t)
		f(t, capability.NewDynamoRegistry(db, table), newProc(t, capability.NewDynamoRegistry(db, table), interval))
	})
}

// TestSavedElsewhereCallableAtOnce: a capability saved in one process is
// callable by name in another at once, statically and dynamically (the
// other process's index, refreshed hourly here, is not what finds it),
// and a new version is what the next execution runs.
func TestSavedElsewhereCallableAtOnce(t *testing.T) {
	twoProcesses(t, time.Hour, func(t *testing.T, writer capability.Registry, reader *proc) {
		ctx := context.Background()
		if _, err := writer.Save(ctx, capability.Capability{Name: "old:one", Code: "return 1"}, nil); err != nil {
			t.Fatal(err)
		}
		// Load the reader's index before the save it must not need.
		if r := reader.run(`return (await tools.list()).length`); !r.OK {
			t.Fatal(r.Error)
		}
		if _, err := writer.Save(ctx, capability.Capability{Name: "fresh:add", Code: "return args.a + args.b"}, nil); err != nil {
			t.Fatal(err)
		}
		for _, code := range []string{
			`return await mcp.fresh.add({a: 2, b: 3})`,
			`const ns = "fre" + "sh"; return await mcp[ns].add({a: 2, b: 3})`,
			`const a = "ad" + "d"; return await mcp.fresh[a]({a: 2, b: 3})`,
		} {
			if r := reader.run(code); !r.OK || string(r.Result) != "5" {
				t.Fatalf("%s: %s %+v", code, r.Result, r.Error)
			}
		}
		if _, err := writer.Save(ctx, capability.Capability{Name: "fresh:add", Code: "return 10 * (args.a + args.b)"}, nil); err != nil {
			t.Fatal(err)
		}
		if r := reader.run(`return await mcp.fresh.add({a: 2, b: 3})`); !r.OK || string(r.Result) != "50" {
			t.Fatalf("the next execution after a new version: %s %+v", r.Result, r.Error)
		}
		// What is not there is still refused at once, with suggestions
		// from the index (which over DynamoDB may not have the newest
		// yet: it is read hourly here).
		r := reader.run(`return await mcp.old.on({})`)
		if r.OK || r.Error.Code != fault.ToolNotFound || !strings.Contains(r.Error.Message, "did you mean mcp.old.one") {
			t.Fatalf("a typo: %+v", r.Error)
		}
		if r := reader.run(`const ns = "gho" + "st"; try { mcp[ns] } catch (e) { return e.code }`); !r.OK || string(r.Result) != `"TOOL_NOT_FOUND"` {
			t.Fatalf("an unknown namespace: %s %+v", r.Result, r.Error)
		}
	})
}

// TestVisibleToSearchWithinTheInterval: tools.search in another process
// finds a new capability within the index's interval (at once on the file
// registry, whose index checks the file on every read).
func TestVisibleToSearchWithinTheInterval(t *testing.T) {
	const interval = time.Second
	twoProcesses(t, interval, func(t *testing.T, writer capability.Registry, reader *proc) {
		ctx := context.Background()
		search := func() []string {
			r := reader.run(`return (await tools.search("zebra")).map(t => t.call)`)
			if !r.OK {
				t.Fatal(r.Error)
			}
			var calls []string
			_ = json.Unmarshal(r.Result, &calls)
			return calls
		}
		if got := search(); len(got) != 0 {
			t.Fatalf("found before the save: %v", got)
		}
		if _, err := writer.Save(ctx, capability.Capability{Name: "zoo:zebra", Code: "return 1", Description: "counts zebra stripes"}, nil); err != nil {
			t.Fatal(err)
		}
		saved := time.Now()
		for !slices.ContainsFunc(search(), func(c string) bool { return strings.HasPrefix(c, "mcp.zoo.zebra(") }) {
			// The bound is the interval; a loaded machine gets room.
			if time.Since(saved) > interval+10*time.Second {
				t.Fatalf("not found by tools.search %v after the save", time.Since(saved))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("found by tools.search %v after the save", time.Since(saved).Round(time.Millisecond))
		if _, ok := writer.(*capability.FileRegistry); ok && time.Since(saved) > interval {
			t.Fatalf("the file registry's index took %v", time.Since(saved))
		}
	})
}

// failingRegistry fails Lookup and HasNamespace.
type failingRegistry struct{ capability.Registry }

var errDown = errors.New("registry down")

func (failingRegistry) Lookup(context.Context, []string) (map[string]capability.Capability, error) {
	return nil, errDown
}
func (failingRegistry) HasNamespace(context.Context, string) (bool, error) { return false, errDown }

// TestRegistryDownIsUnavailable: a name the registry cannot be asked about
// is UNAVAILABLE (retryable), statically and dynamically, not
// TOOL_NOT_FOUND; code naming no capability runs as ever.
func TestRegistryDownIsUnavailable(t *testing.T) {
	base := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	if _, err := base.Save(context.Background(), capability.Capability{Name: "m:x", Code: "return 1"}, nil); err != nil {
		t.Fatal(err)
	}
	p := newProc(t, failingRegistry{base}, time.Hour)
	for _, code := range []string{`return await mcp.m.x({})`, `const n = "m"; return await mcp[n].x({})`, `const n = "x"; return await mcp.demo.add({a: 1, b: 1}) + await mcp.m[n]({})`} {
		r := p.run(code)
		if r.OK || r.Error.Code != fault.Unavailable || !r.Error.Retryable {
			t.Fatalf("%s: %+v; want a retryable UNAVAILABLE", code, r.Error)
		}
	}
	if r := p.run(`return await mcp.demo.add({a: 1, b: 1})`); !r.OK {
		t.Fatal(r.Error)
	}
}

// TestDynamicLookupsAreBounded: a script that reaches name after name it
// does not name literally gets LIMIT_EXCEEDED past the bound, each miss
// costing the registry at most one read.
func TestDynamicLookupsAreBounded(t *testing.T) {
	db, table, counter := countedTable(t)
	reg := capability.NewDynamoRegistry(db, table)
	if _, err := reg.Save(context.Background(), capability.Capability{Name: "m:x", Code: "return 1"}, nil); err != nil {
		t.Fatal(err)
	}
	p := newProc(t, reg, time.Hour)
	counter.take()
	r := p.run(`let missing = 0;
for (let i = 0; i < 300; i++) { try { await mcp.m["t" + i]({}) } catch (e) { if (e.code !== "TOOL_NOT_FOUND") return [i, e.code, e.limit]; missing++ } }
return missing`)
	if !r.OK || !strings.Contains(string(r.Result), `"LIMIT_EXCEEDED","name_lookups"`) {
		t.Fatalf("%s %+v", r.Result, r.Error)
	}
	if got := counter.take(); got["BatchGetItem"]+got["GetItem"] > 101 {
		t.Fatalf("%v requests for at most 100 names", got)
	}
	// A script reaching name after name past the bound grows nothing
	// without end: past twice the bound names are simply not found.
	r = p.run(`const codes = {};
for (let i = 0; i < 5000; i++) { try { mcp.m["t" + i] } catch (e) { codes[e.code] = (codes[e.code] || 0) + 1 } }
let limited = 0;
for (let i = 0; i < 5000; i++) { try { await mcp.m["u" + i]({}) } catch (e) { if (e.code === "LIMIT_EXCEEDED") limited++ } }
return [codes, limited]`)
	if !r.OK || string(r.Result) != `[{"TOOL_NOT_FOUND":4900},0]` {
		t.Fatalf("%s %+v", r.Result, r.Error)
	}
}

// TestNarrowingOfResolvedNames: a request's filter judges capabilities
// the code does not name against the whole catalog, and names resolved as
// the script reaches them are narrowed as static ones are: filtered out is
// TOOL_NOT_FOUND, outside an inherited narrowing FORBIDDEN.
func TestNarrowingOfResolvedNames(t *testing.T) {
	w := newWorld(t, map[string]string{
		"math:sum":  "return args.xs.reduce((a, b) => a + b, 0)",
		"math:one":  "return 1",
		"iso:reach": `const n = "ma" + "th"; return await mcp[n].one({})`,
	})
	tests := []struct {
		name, code string
		tools      []string
		want       string
		code2      fault.Code
		contains   string
	}{
		{name: "a pattern selecting only capabilities the code does not name", code: "return 1", tools: []string{"math:*"}, want: "1"},
		{name: "a pattern selecting nothing", code: "return 1", tools: []string{"maths:*"}, code2: fault.ToolNotFound, contains: `did you mean math:*`},
		{name: "dynamic access within the filter", code: `const n = "ma" + "th"; return await mcp[n].sum({xs: [2, 3]})`, tools: []string{"math:sum"}, want: "5"},
		{name: "dynamic access outside the filter", code: `const n = "ma" + "th"; try { mcp[n].one } catch (e) { return e.code }`, tools: []string{"math:sum"}, want: `"TOOL_NOT_FOUND"`},
		{name: "dynamic access outside an inherited narrowing", code: "return await mcp.iso.reach({})", tools: []string{"iso:*"}, code2: fault.Forbidden, contains: "math:one"},
		{name: "the same, unnarrowed", code: "return await mcp.iso.reach({})", want: "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := w.runNarrowed(tt.code, tt.tools...)
			if tt.code2 != "" {
				if r.OK || r.Error.Code != tt.code2 || !strings.Contains(r.Error.Message, tt.contains) {
					t.Fatalf("got %s %+v; want %s containing %q", r.Result, r.Error, tt.code2, tt.contains)
				}
				return
			}
			if !r.OK || string(r.Result) != tt.want {
				t.Fatalf("got %s %+v; want %s", r.Result, r.Error, tt.want)
			}
		})
	}
}
