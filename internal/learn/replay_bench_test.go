package learn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/learn"
	"github.com/pml-sandbox/pml/internal/testutil/cputime"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/trace"
)

// The replay: 200 scripted agent tasks on the demo tools, 30 % of them
// repeats of 10 patterns (6 runs each) with fresh literals every time, the
// rest programs seen once. Each pattern's program starts with the comment
// an agent writes and reads what it needs from literals; its intent is the
// query the agent would give tools.search.
type replayPattern struct {
	intent string // its comment
	query  string // what the agent asks tools.search later: the intent in other words
	code   func(r *rand.Rand) string
}

func word(r *rand.Rand) string {
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"}
	return words[r.IntN(len(words))]
}

func text(r *rand.Rand) string {
	n := 3 + r.IntN(5)
	ws := make([]string, n)
	for i := range ws {
		ws[i] = word(r)
	}
	return strings.Join(ws, " ")
}

var replayPatterns = []replayPattern{
	{"count the words of a text and store the count", "word count of a text, saved in the store", func(r *rand.Rand) string {
		return fmt.Sprintf("// count the words of a text and store the count\nconst w = await mcp.demo.word_count({text: %q});\nawait mcp.demo.kv_set({key: %q, value: w.words});\nreturn w.words", text(r), "count:"+word(r))
	}},
	{"read a stored number and add to it", "add a number to a value kept in the store", func(r *rand.Rand) string {
		return fmt.Sprintf("// read a stored number and add to it\nconst v = await mcp.demo.kv_get({key: %q});\nconst s = await mcp.demo.add({a: v.found ? v.value : 0, b: %d});\nreturn s", "n:"+word(r), r.IntN(100))
	}},
	{"upper case a text and count its words", "uppercase text then count words", func(r *rand.Rand) string {
		return fmt.Sprintf("// upper case a text and count its words\nconst t = await mcp.demo.transform_text({text: %q, op: \"upper\"});\nreturn await mcp.demo.word_count({text: t})", text(r))
	}},
	{"store a value then read it back", "save a key then fetch it again", func(r *rand.Rand) string {
		return fmt.Sprintf("// store a value then read it back\nawait mcp.demo.kv_set({key: %q, value: %q});\nreturn await mcp.demo.kv_get({key: %q})", "k:"+word(r), word(r), "k:"+word(r))
	}},
	{"list the stored keys with a prefix and echo them", "keys in the store starting with a prefix", func(r *rand.Rand) string {
		return fmt.Sprintf("// list the stored keys with a prefix and echo them\nconst l = await mcp.demo.kv_list({prefix: %q});\nreturn await mcp.demo.echo({keys: l.keys, asked: %q})", word(r)[:2], word(r))
	}},
	{"get the current time and store it under a key", "remember the current time in the store", func(r *rand.Rand) string {
		return fmt.Sprintf("// get the current time and store it under a key\nconst now = await mcp.demo.now({});\nawait mcp.demo.kv_set({key: %q, value: now.iso});\nreturn now.iso", "time:"+word(r))
	}},
	{"add two numbers and echo the sum", "sum two numbers", func(r *rand.Rand) string {
		return fmt.Sprintf("// add two numbers and echo the sum\nconst s = await mcp.demo.add({a: %d, b: %d});\nreturn await mcp.demo.echo({sum: s, label: %q})", r.IntN(1000), r.IntN(1000), word(r))
	}},
	{"reverse a text and store it", "reverse text and save it", func(r *rand.Rand) string {
		return fmt.Sprintf("// reverse a text and store it\nconst t = await mcp.demo.transform_text({text: %q, op: \"reverse\"});\nawait mcp.demo.kv_set({key: %q, value: t});\nreturn t", text(r), "rev:"+word(r))
	}},
	{"count the words of a stored text", "how many words in a stored document", func(r *rand.Rand) string {
		return fmt.Sprintf("// count the words of a stored text\nconst v = await mcp.demo.kv_get({key: %q});\nreturn await mcp.demo.word_count({text: v.found ? String(v.value) : %q})", "doc:"+word(r), text(r))
	}},
	{"title case a text and echo it with a tag", "title case text with a tag", func(r *rand.Rand) string {
		return fmt.Sprintf("// title case a text and echo it with a tag\nconst t = await mcp.demo.transform_text({text: %q, op: \"title\"});\nreturn await mcp.demo.echo({text: t, tag: %q})", text(r), word(r))
	}},
}

// uniqueTask is a program seen once: a property name of its own makes its
// shape its own.
func uniqueTask(r *rand.Rand, i int) string {
	tools := []string{`mcp.demo.word_count({text: %q})`, `mcp.demo.echo({v: %q})`, `mcp.demo.transform_text({text: %q, op: "lower"})`, `mcp.demo.kv_get({key: %q})`}
	first := fmt.Sprintf(tools[r.IntN(len(tools))], text(r))
	return fmt.Sprintf("const r = await %s;\nreturn await mcp.demo.echo({step_%d: r, note: %q})", first, i, word(r))
}

type task struct {
	pattern int // -1: seen once
	code    string
}

func replayTasks(seed uint64) []task {
	r := rand.New(rand.NewPCG(seed, seed))
	var tasks []task
	for p := range replayPatterns {
		for range 6 {
			tasks = append(tasks, task{pattern: p, code: replayPatterns[p].code(r)})
		}
	}
	for i := range 140 {
		tasks = append(tasks, task{pattern: -1, code: uniqueTask(r, i)})
	}
	r.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	return tasks
}

// newReplayApp is the local wiring (app.New) on the shared engine: demo
// tools, traces in cfg's store, capabilities in a file.
func newReplayApp(b *testing.B, traces app.TraceConfig, learnOff bool) *app.App {
	b.Helper()
	dir := b.TempDir()
	if traces.Store == app.StoreFile {
		traces.File = dir + "/traces.jsonl"
	}
	a, err := app.New(context.Background(), app.Config{Engine: engine, Demo: true, Traces: traces, CapabilitiesFile: dir + "/caps.json",
		Approval: app.ApprovalConfig{Policy: approval.Policy{CallerDecides: true}, KeyFile: dir + "/key"}, Learn: app.LearnConfig{Off: learnOff}},
		slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(context.Background()) })
	return a
}

func run(b *testing.B, a *app.App, code string) *execution.Response {
	b.Helper()
	ctx := context.Background()
	resp := a.Service.Execute(ctx, execution.Request{Code: code, TimeoutMS: 30000})
	if err := a.Service.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return resp
}

// BenchmarkReplay replays the 200 tasks against `pml`'s local wiring (the
// trace file, learn.Local, the file registry) and reports: after how many
// runs each pattern is suggested (goal ≤ 3); the share of the later tasks
// of a pattern whose tools.search top 3 holds the capability published
// from its suggestion (goal ≥ 90 %); and the code a reuse saves (the
// program's bytes less the call's). Each iteration is a whole replay with
// fresh stores: run it with -benchtime 1x.
func BenchmarkReplay(b *testing.B) {
	var suggestedAfter []int
	var later, found, lexical, reuses int
	var saved, calls int64
	for b.Loop() {
		suggestedAfter, later, found, lexical, reuses, saved, calls = nil, 0, 0, 0, 0, 0, 0
		a := newReplayApp(b, app.TraceConfig{Store: app.StoreFile}, false)
		published := map[int]learn.Suggestion{}
		runs := map[int]int{}
		for _, tk := range replayTasks(30) {
			if tk.pattern < 0 {
				if resp := run(b, a, tk.code); !resp.OK {
					b.Fatalf("task failed: %v\n%s", resp.Error, tk.code)
				}
				continue
			}
			if s, ok := published[tk.pattern]; ok {
				// A later task: the agent searches, then calls what it
				// found instead of writing the program again.
				later++
				q, _ := json.Marshal(replayPatterns[tk.pattern].query)
				resp := run(b, a, "return (await tools.search("+string(q)+", 3)).map(t => t.server + \":\" + t.name)")
				var top []string
				if err := json.Unmarshal(resp.Result, &top); err != nil || !resp.OK {
					b.Fatalf("search: %v %s", resp.Error, resp.Result)
				}
				// The same search, lexical alone (no evidence, no graph),
				// for comparison.
				for _, h := range catalog.Search(a.Service.Catalog(context.Background()), replayPatterns[tk.pattern].query, 3) {
					if h.Tool.FullName() == s.Name {
						lexical++
					}
				}
				if !slices.Contains(top, s.Name) {
					b.Logf("%q: top 3 %v lacks %s", replayPatterns[tk.pattern].query, top, s.Name)
					continue
				}
				found++
				call := callOf(s, tk.code)
				if resp := run(b, a, call); !resp.OK {
					b.Fatalf("calling %s failed: %v\n%s", s.Name, resp.Error, call)
				}
				reuses++
				saved += int64(len(tk.code) - len(call))
				calls += int64(len(call))
				continue
			}
			if resp := run(b, a, tk.code); !resp.OK {
				b.Fatalf("task failed: %v\n%s", resp.Error, tk.code)
			}
			runs[tk.pattern]++
			list, err := learn.Suggestions(context.Background(), a.Learn, learn.Query{})
			if err != nil {
				b.Fatal(err)
			}
			for _, s := range list {
				if s.Successes == int64(runs[tk.pattern]) && strings.Contains(s.Description, firstLine(tk.code)) {
					suggestedAfter = append(suggestedAfter, runs[tk.pattern])
					o, err := app.PublishSuggestion(context.Background(), a.Guard, approval.Decider{Channel: execution.ChannelCaller}, s)
					if err != nil || o.Capability == nil {
						b.Fatalf("publishing %s: %+v %v", s.ID, o, err)
					}
					s.Name = o.Capability.Name
					published[tk.pattern] = s
				}
			}
		}
	}
	if len(suggestedAfter) != len(replayPatterns) {
		b.Fatalf("%d of %d patterns suggested", len(suggestedAfter), len(replayPatterns))
	}
	b.ReportMetric(float64(slices.Max(suggestedAfter)), "max-runs-to-suggest")
	b.ReportMetric(float64(found)/float64(later)*100, "%-top3")
	b.ReportMetric(float64(lexical)/float64(later)*100, "%-top3-lexical-only")
	b.ReportMetric(float64(later), "later-tasks")
	b.ReportMetric(float64(saved)/float64(reuses), "bytes-saved/reuse")
	b.ReportMetric(float64(calls)/float64(reuses), "call-bytes/reuse")
	b.Logf("suggested after %v runs; %d of %d later tasks found their capability in the top 3; %d reuses saved %d bytes", suggestedAfter, found, later, reuses, saved)
}

func firstLine(code string) string {
	l, _, _ := strings.Cut(code, "\n")
	return strings.TrimPrefix(l, "// ")
}

// callOf is the call an agent writes instead of code: the capability
// with the task's own values for the inputs the suggestion made of its
// literals.
func callOf(s learn.Suggestion, code string) string {
	p, err := analysis.Parse(code)
	if err != nil {
		panic(err)
	}
	lits := learn.Read(p, nil).Literals
	args := map[string]any{}
	for _, in := range s.Inputs {
		if in.Literal == 0 {
			continue
		}
		l := lits[in.Literal-1]
		if l.Kind == "n" {
			var n float64
			_, _ = fmt.Sscan(l.Value, &n)
			args[in.Name] = n
		} else {
			args[in.Name] = l.Value
		}
	}
	raw, _ := json.Marshal(args)
	ns, act, _ := strings.Cut(s.Name, ":")
	return fmt.Sprintf("return await mcp.%s.%s(%s)", ns, act, raw)
}

// BenchmarkExecution is the per-execution cost with learning on and off:
// the replay's 200 programs in turn, each run once on a service with
// learning and once on one without (same wiring, traces in memory: no I/O,
// so the difference is learning's CPU), alternating so that the machine's
// load falls on both alike. It reports each side's wall and CPU time per
// execution and the difference in per cent.
func BenchmarkExecution(b *testing.B) {
	tasks := replayTasks(30)
	on := newReplayApp(b, app.TraceConfig{Store: app.StoreMemory, Keep: 100}, false)
	off := newReplayApp(b, app.TraceConfig{Store: app.StoreMemory, Keep: 100}, true)
	var wall, cpu [2]time.Duration
	i := 0
	for b.Loop() {
		code := tasks[i%len(tasks)].code
		for side, a := range []*app.App{on, off} {
			if i%2 == 1 {
				side, a = 1-side, []*app.App{on, off}[1-side] // alternate which goes first
			}
			c0, t0 := cputime.Process(), time.Now()
			if resp := run(b, a, code); !resp.OK {
				b.Fatal(resp.Error)
			}
			wall[side] += time.Since(t0)
			cpu[side] += cputime.Process() - c0
		}
		i++
	}
	n := float64(b.N)
	b.ReportMetric(float64(wall[0].Microseconds())/n, "on-µs/exec")
	b.ReportMetric(float64(wall[1].Microseconds())/n, "off-µs/exec")
	b.ReportMetric(float64(cpu[0].Microseconds())/n, "on-cpu-µs/exec")
	b.ReportMetric(float64(cpu[1].Microseconds())/n, "off-cpu-µs/exec")
	b.ReportMetric((float64(wall[0])/float64(wall[1])-1)*100, "%-wall-on-vs-off")
	b.ReportMetric((float64(cpu[0])/float64(cpu[1])-1)*100, "%-cpu-on-vs-off")
}

// BenchmarkReadShape is what learning adds to an execution on its own:
// learn.Read of a pattern's program from the tree the analysis parsed,
// and the pattern (the parse itself is the analysis's, done anyway).
func BenchmarkReadShape(b *testing.B) {
	code := replayPatterns[0].code(rand.New(rand.NewPCG(1, 1)))
	l := learn.NewLearner(nil)
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := analysis.Parse(code); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Read consumes the tree, so each Read needs a parse: the
	// difference of the two is Read's cost (stopping the timer around the
	// parse would cost more than Read).
	b.Run("parse+read", func(b *testing.B) {
		calls := []trace.Call{{CallID: 1, Server: "demo", Tool: "word_count"}, {CallID: 2, Server: "demo", Tool: "kv_set"}}
		for b.Loop() {
			p, _ := analysis.Parse(code)
			if l.Pattern("agent", learn.Read(p, nil), calls) == nil {
				b.Fatal("no pattern")
			}
		}
	})
}

// BenchmarkStoreRequests counts what an execution asks of the DynamoDB
// trace store with learning on and off: the 200 programs run on the
// deployed store (DynamoDB Local behind a proxy that counts the requests
// by operation and their bytes). Learning adds no request: the pattern
// travels in the execution's item (the bytes it adds are reported).
func BenchmarkStoreRequests(b *testing.B) {
	inst := dynamolocal.Start(b)
	tasks := replayTasks(30)
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("learn=%v", on), func(b *testing.B) {
			proxy := countingProxy(b, inst.Endpoint)
			table := fmt.Sprintf("replay_%v_%d", on, time.Now().UnixNano())
			a := newReplayApp(b, app.TraceConfig{Store: app.StoreDynamo, Table: table, Endpoint: proxy.url}, !on)
			proxy.reset()
			n := 0
			for b.Loop() {
				for _, tk := range tasks {
					if resp := run(b, a, tk.code); !resp.OK {
						b.Fatal(resp.Error)
					}
					n++
				}
			}
			ops, bytes := proxy.counts()
			var names []string
			for op := range ops {
				names = append(names, op)
			}
			slices.Sort(names)
			for _, op := range names {
				b.ReportMetric(float64(ops[op])/float64(n), op+"/exec")
			}
			b.ReportMetric(float64(bytes)/float64(n), "request-bytes/exec")
		})
	}
}

// proxy counts the DynamoDB requests that pass through it.
type proxy struct {
	url   string
	mu    sync.Mutex
	ops   map[string]int
	bytes int64
}

func (p *proxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ops, p.bytes = map[string]int{}, 0
}

func (p *proxy) counts() (map[string]int, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ops, p.bytes
}

func countingProxy(b *testing.B, endpoint string) *proxy {
	b.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		b.Fatal(err)
	}
	p := &proxy{ops: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		p.mu.Lock()
		p.ops[op]++
		p.bytes += int64(len(body))
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	p.url = "http://" + ln.Addr().String()
	return p
}
