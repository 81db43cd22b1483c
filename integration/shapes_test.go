package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/testutil/xraylisten"
)

// TestScriptShapes measures what docs/DEPLOY.md's cost section prices: for
// three script shapes, through the deployed shape (both function binaries
// behind the emulator, traces to DynamoDB Local, X-Ray to a UDP stand-in,
// the demo MCP servers on loopback), the time each invocation takes (what
// Lambda bills), the trace items written, the X-Ray documents sent and the
// functions' peak resident memory. It checks that the items are those the
// cost section counts. It is a measurement, run on demand:
//
//	PML_SHAPES=30 go test -run TestScriptShapes -v ./integration/
func TestScriptShapes(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PML_SHAPES"))
	if n <= 0 {
		t.Skip("PML_SHAPES (runs per shape) is unset")
	}
	s := newStack(t)
	save := approverEvent("POST", "/capabilities", `{"name": "math:dbl", "code": "return args.x * 2"}`)
	if resp, _ := decodeHTTP(t, s.invoke(t, "execute", save, "")); resp.StatusCode != 201 {
		t.Fatalf("saving the capability: %+v", resp)
	}
	shapes := []struct {
		name, code string
		fn         string // the function invoked; "" is execute
		calls      int    // tool calls of the root execution
		distinct   int    // distinct tools among them
		children   int    // capability runs (each its own execution)
	}{
		{name: "pure compute", code: `const rows = Array.from({length: 2000}, (_, i) => ({id: i, v: (i * 7919) % 1000}));
rows.sort((a, b) => a.v - b.v);
return rows.filter(r => r.v % 3 === 0).reduce((s, r) => s + r.v, 0)`},
		{name: "5 remote tool calls (loopback)", code: `const w = await mcp.text.word_count({text: "one two three"});
const u = await mcp.text.transform_text({text: "hi", op: "upper"});
await mcp.kv.kv_set({key: "k", value: w.words});
const v = await mcp.kv.kv_get({key: "k"});
const w2 = await mcp.text.word_count({text: String(u.result ?? u.text ?? u)});
return [v.value, w2.words]`, calls: 5, distinct: 4},
		{name: "5 remote tool calls, 50 ms each", code: `for (let i = 0; i < 5; i++) await mcp.text.sleep({ms: 50});
return 5`, calls: 5, distinct: 1},
		{name: "a capability call", code: `return await mcp.math.dbl({x: 21})`, calls: 1, distinct: 1, children: 1},
		{name: "the capability function's own run", fn: "capability"},
	}
	ctx := context.Background()
	for _, sh := range shapes {
		var took []time.Duration
		var script []float64 // the execution's own duration, as traced
		var segs []int
		flushFailed := 0
		for i := range n + 2 {
			root := newTraceRoot()
			header := "Root=" + root + ";Parent=53995c3f42cd8ad8;Sampled=1"
			fn, payload := "execute", any(map[string]any{"code": sh.code})
			if sh.fn == "capability" {
				fn, payload = "capability", map[string]any{"parent": map[string]any{"capability": "math:dbl", "trace_header": header},
					"args": map[string]int{"x": 21}}
			}
			start := time.Now()
			raw := s.invoke(t, fn, payload, header)
			d := time.Since(start)
			var r execution.Response
			if err := json.Unmarshal(raw, &r); err != nil || !r.OK {
				t.Fatalf("%s: %s", sh.name, raw)
			}
			if i < 2 {
				continue // the first runs start the processes and connections
			}
			took = append(took, d)
			script = append(script, r.DurationMS)
			if sh.fn != "" {
				continue
			}
			// The items the cost section counts: the execution, one per
			// call, each capability run's execution and its calls.
			ex, calls, err := s.traces.GetExecution(ctx, r.ExecutionID)
			if err != nil || len(calls) < sh.calls {
				// The flush before answering is bounded (lambdaevents'
				// FlushMargin, 500 ms); DynamoDB Local on a loaded machine
				// can take longer. Counted, not hidden.
				flushFailed++
				continue
			}
			if len(calls) != sh.calls || ex.Calls != sh.calls {
				t.Fatalf("%s: stored %+v with %d calls, want %d", sh.name, ex, len(calls), sh.calls)
			}
			children := 0
			for _, c := range calls {
				if c.ChildExecutionID != "" {
					if _, _, err := s.traces.GetExecution(ctx, c.ChildExecutionID); err != nil {
						t.Fatalf("%s: child %s: %v", sh.name, c.ChildExecutionID, err)
					}
					children++
				}
			}
			tools := map[string]bool{}
			for _, c := range calls {
				tools[c.Server+":"+c.Tool] = true
			}
			if children != sh.children || len(tools) != sh.distinct {
				t.Fatalf("%s: %d capability runs and %d distinct tools, want %d and %d", sh.name, children, len(tools), sh.children, sh.distinct)
			}
			got, _ := s.xray.Wait(2*time.Second, func(ss []xraylisten.Segment) bool { return countTrace(ss, root) >= 1+sh.calls })
			segs = append(segs, countTrace(got, root))
		}
		slices.Sort(took)
		slices.Sort(script)
		slices.Sort(segs)
		med := took[len(took)/2]
		p90 := took[len(took)*9/10]
		items := 1 + sh.calls + sh.children
		t.Logf("SHAPE %-38s median %7.1f ms  p90 %7.1f ms  (script alone: median %.1f ms)  items %d  counters %d  X-Ray documents (median) %v  incomplete flushes %d/%d",
			sh.name, ms(med), ms(p90), script[len(script)/2], items, sh.distinct*(sh.distinct-1), segs[len(segs)/2:len(segs)/2+min(1, len(segs))], flushFailed, n)
	}
	for _, bin := range []string{bins.execute, bins.capability} {
		t.Logf("PEAK RSS %s: %s", filepath.Base(bin), peakRSS(bin))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func newTraceRoot() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("1-%08x-%s", time.Now().Unix(), hex.EncodeToString(b[:]))
}

// countTrace counts the X-Ray documents (segments and subsegments) of one
// trace.
func countTrace(ss []xraylisten.Segment, root string) int {
	n := 0
	for _, s := range ss {
		if s.TraceID == root {
			n++
		}
	}
	return n
}

// peakRSS reads the peak resident set (VmHWM) of every running process of
// the binary bin.
func peakRSS(bin string) string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, d := range dirs {
		if exe, err := os.Readlink(filepath.Join(d, "exe")); err != nil || exe != bin {
			continue
		}
		f, err := os.Open(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				out = append(out, strings.TrimSpace(v))
			}
		}
		f.Close()
	}
	return strings.Join(out, ", ")
}
