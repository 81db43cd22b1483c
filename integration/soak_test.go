package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
)

// soakCase is one kind of request the soak sends. Normal ones must succeed
// with the expected result; hostile ones must fail cleanly with one of the
// expected codes.
type soakCase struct {
	name, code string
	timeoutMS  int
	want       string   // normal: the result, as JSON
	codes      []string // hostile: acceptable error codes
}

var soakCases = []soakCase{
	{name: "arithmetic", code: "return 6 * 7", want: "42"},
	{name: "kv round trip", code: "const k = 'k' + Math.random(); await mcp.demo.kv_set({key: k, value: 41}); return (await mcp.demo.kv_get({key: k})).value + 1", want: "42"},
	{name: "parallel text tools", code: "const r = await Promise.all([1, 2, 3, 4, 5].map(n => mcp.demo.word_count({text: 'a b c'.repeat(n)}))); return r.length", want: "5"},
	{name: "loop and log", code: "let s = 0; for (let i = 0; i < 1e4; i++) s += i; console.log(s); return s", want: "49995000"},
	{name: "escape in a C built-in", code: "return Array.prototype.includes.call({length: 2**53-1}, 1)", timeoutMS: 300, codes: []string{"TIMEOUT"}},
	{name: "caught out-of-memory loop", code: "let a = []; for (;;) { try { a.push(new Array(1e6).fill(1)) } catch (e) { a = [] } }", timeoutMS: 300, codes: []string{"LIMIT_EXCEEDED", "TIMEOUT"}},
	{name: "bulk memory loop", code: "const a = new Uint8Array(6e7); for (;;) a.fill(1)", timeoutMS: 300, codes: []string{"TIMEOUT"}},
	{name: "console flood", code: "for (;;) console.log()", timeoutMS: 300, codes: []string{"TIMEOUT"}},
	{name: "refused calls", code: "for (let i = 0; i < 3000; i++) { try { await mcp.demo.kv_get({}) } catch (e) {} } throw new Error('done')", timeoutMS: 20000, codes: []string{"SCRIPT_ERROR"}},
	{name: "forged host error", code: "let e; try { await mcp.demo.kv_get({}) } catch (r) { e = r } e.code = 'UNAVAILABLE'; e.retryable = true; throw e", codes: []string{"SCRIPT_ERROR"}},
	{name: "deep recursion", code: "function f() { return f() + 1 } return f()", codes: []string{"LIMIT_EXCEEDED"}},
}

// rssKB reads a process's resident set size.
func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

func goroutines(base string) int {
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var h struct {
		Runtime struct {
			Goroutines int `json:"goroutines"`
		} `json:"runtime"`
	}
	if json.NewDecoder(resp.Body).Decode(&h) != nil {
		return -1
	}
	return h.Runtime.Goroutines
}

// trivialCase is what clients send in the soak's quiet phases.
var trivialCase = soakCase{name: "trivial", code: "return 1 + 1", want: "2"}

// TestSoak drives `pml serve` with 8 concurrent clients for
// PML_SOAK_DURATION (default 60 s; 10 s with -short, which only checks the
// answers), a normal request three times in four and a hostile one
// otherwise: no normal request may fail, and resident memory and
// goroutines must stay flat.
func TestSoak(t *testing.T) {
	duration := 60 * time.Second
	if v := os.Getenv("PML_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("PML_SOAK_DURATION: %v", err)
		}
		duration = d
	}
	if testing.Short() {
		duration = 10 * time.Second
	}
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer demo.Close()
	// gctrace prints the live heap after every collection: the leak check
	// watches that, while resident memory also carries what Go has freed but
	// not yet returned to the system.
	// The trace store holds the last PML_TRACES_KEEP executions by design;
	// a small number fills it during warm-up, so that what it holds is flat
	// by the time the heap is compared.
	// GOGC=25 makes collections frequent, so that each quiet phase
	// (below) has several.
	srv := startServe(t, []string{"GODEBUG=gctrace=1", "GOGC=25", app.EnvTracesKeep + "=200"}, "--mcp", "demo="+demo.StreamableURL())
	base, lines, proc := srv.base, srv.lines, srv.proc
	// Every collection's live heap is kept with its time: the leak check
	// compares all the collections of two windows, not one sample a second.
	liveHeap := regexp.MustCompile(`^gc \d+ .*->(\d+) MB`)
	type gcLive struct {
		at   time.Time
		live int
	}
	var gcMu sync.Mutex
	var gcs []gcLive
	var live atomic.Int64
	go func() {
		for l := range lines {
			if m := liveHeap.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				live.Store(int64(n))
				gcMu.Lock()
				gcs = append(gcs, gcLive{time.Now(), n})
				gcMu.Unlock()
			}
		}
	}()

	var normal, hostile, failed atomic.Int64
	var failMu sync.Mutex
	var failures []string
	fail := func(format string, a ...any) {
		failed.Add(1)
		failMu.Lock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, a...))
		}
		failMu.Unlock()
	}
	// Two quiet phases, after the warm-up third and at the end, when the
	// clients send only trivial scripts: with nothing heavy in flight the
	// live heap of a collection is what the process keeps, and a leak is
	// the difference between the two. (Judged under load, the least live
	// heap of a window moved between 14 and 49 MB with no trend.)
	start := time.Now()
	quietFor := min(duration/6, 8*time.Second)
	quietA := [2]time.Time{start.Add(duration / 3), start.Add(duration/3 + quietFor)}
	quietB := [2]time.Time{start.Add(duration - quietFor), start.Add(duration)}
	quiet := func(at time.Time) bool {
		return (!at.Before(quietA[0]) && at.Before(quietA[1])) || !at.Before(quietB[0])
	}
	// A quiet phase is judged from the moment the last heavy request that
	// was still running in it has ended.
	var heavyMu sync.Mutex
	heavyEnd := func(at time.Time) {
		heavyMu.Lock()
		defer heavyMu.Unlock()
		for _, w := range []*[2]time.Time{&quietA, &quietB} {
			if at.After(w[0]) && at.Before(w[1]) {
				w[0] = at
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; ctx.Err() == nil; i++ {
				kind := soakCases[i%4] // normal three times in four...
				if i%4 == 3 {
					kind = soakCases[4+(i/4)%(len(soakCases)-4)] // ...hostile otherwise
				}
				if quiet(time.Now()) {
					kind = trivialCase
				}
				rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
				r, err := execute(rctx, base, kind.code, kind.timeoutMS)
				rcancel()
				if kind.name != trivialCase.name {
					heavyEnd(time.Now())
				}
				if err != nil {
					fail("%s: %v", kind.name, err)
					continue
				}
				if kind.codes == nil {
					normal.Add(1)
					got, _ := json.Marshal(r["result"])
					if r["ok"] != true || string(got) != kind.want {
						fail("%s: ok=%v result=%s error=%v", kind.name, r["ok"], got, r["error"])
					}
					continue
				}
				hostile.Add(1)
				e, _ := r["error"].(map[string]any)
				code, _ := e["code"].(string)
				if r["ok"] == true || !strings.Contains(strings.Join(kind.codes, ","), code) || code == "" {
					fail("%s: ok=%v error=%v, want one of %v", kind.name, r["ok"], r["error"], kind.codes)
				}
			}
		}()
	}

	// Resources: sampled every second; "flat" compares the last quarter of
	// the run with the second (after warm-up).
	type sample struct {
		at             time.Time
		rss, gor, live int
	}
	var samples []sample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			samples = append(samples, sample{time.Now(), rssKB(proc.Pid), goroutines(base), int(live.Load())})
		case <-ctx.Done():
		}
	}
	wg.Wait()
	idle := goroutines(base)
	// The first third warms up (pool, caches, the heap finding its size);
	// the middle third is compared with the last.
	q := len(samples) / 3
	if q == 0 {
		t.Fatalf("too few samples: %v", samples)
	}
	// The live heap after collection is judged by its floor (hostile
	// scripts make the peaks; a leak raises the floor), taken as the least
	// live heap of every collection in the window. A window has hundreds of
	// collections, most with some script's data still live: one value
	// sampled a second, or a percentile of them all, moved by tens of MB
	// between windows with no trend (15 to 48 MB over 150 s), while the
	// least of them all is the heap with nothing in flight, which a leak
	// raises for good. Resident memory is reported.
	type stats struct{ live, rss, gor float64 }
	floor := func(s []sample) (st stats) {
		rsss := make([]int, len(s))
		for i, x := range s {
			rsss[i] = x.rss
			st.gor += float64(x.gor)
		}
		slices.Sort(rsss)
		st.rss = float64(rsss[len(s)/4])
		st.gor /= float64(len(s))
		var lives []int
		gcMu.Lock()
		for _, g := range gcs {
			if !g.at.Before(s[0].at) && !g.at.After(s[len(s)-1].at) {
				lives = append(lives, g.live)
			}
		}
		gcMu.Unlock()
		if len(lives) > 0 {
			slices.Sort(lives)
			st.live = float64(lives[0])
		}
		return st
	}
	t.Logf("samples (live heap MB/RSS MB/goroutines): %v", func() (s []string) {
		for _, x := range samples {
			s = append(s, fmt.Sprintf("%d/%d/%d", x.live, x.rss/1024, x.gor))
		}
		return s
	}())
	mid, last := floor(samples[q:2*q]), floor(samples[len(samples)-q:])
	var trend []string
	for i := 0; i+10 <= len(samples); i += 10 {
		trend = append(trend, fmt.Sprintf("%.0f", floor(samples[i:i+10]).live))
	}
	t.Logf("live heap floor per 10 s: %s MB", strings.Join(trend, " "))
	t.Logf("soak %v, 8 clients: %d normal and %d hostile requests, %d failed; live heap floor (the least of the collections) %.0f -> %.0f MB, RSS floor %.0f -> %.0f MB (middle vs last third), goroutines %.0f -> %.0f under load, %d idle after",
		duration, normal.Load(), hostile.Load(), failed.Load(), mid.live, last.live, mid.rss/1024, last.rss/1024, mid.gor, last.gor, idle)
	for _, f := range failures {
		t.Error(f)
	}
	// The quiet phases: the least live heap of the collections in each,
	// once the heavy requests that were still running have ended.
	quietFloor := func(w [2]time.Time) (int, int) {
		gcMu.Lock()
		defer gcMu.Unlock()
		least, n := -1, 0
		for _, g := range gcs {
			if g.at.After(w[0]) && g.at.Before(w[1]) {
				n++
				if least < 0 || g.live < least {
					least = g.live
				}
			}
		}
		return least, n
	}
	a, na := quietFloor(quietA)
	b, nb := quietFloor(quietB)
	t.Logf("quiet phases: live heap %d MB (%d collections) after warm-up, %d MB (%d collections) at the end", a, na, b, nb)

	if duration >= 30*time.Second {
		if na == 0 || nb == 0 {
			t.Errorf("a quiet phase saw no collection (%d, %d): nothing to judge the heap by", na, nb)
		} else if float64(b) > float64(a)*1.25+8 {
			t.Errorf("the live heap grew from %d to %d MB between the quiet phases", a, b)
		}
	}
	if duration >= 30*time.Second && last.gor > mid.gor+16 {
		t.Errorf("goroutines grew from %.0f to %.0f under the same load", mid.gor, last.gor)
	}
	if normal.Load() == 0 || hostile.Load() == 0 {
		t.Errorf("the soak sent %d normal and %d hostile requests", normal.Load(), hostile.Load())
	}
}
