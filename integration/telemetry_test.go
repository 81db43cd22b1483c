package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/metrics"
	"github.com/pml-sandbox/pml/internal/testutil/otlpreceiver"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
	"github.com/pml-sandbox/pml/internal/testutil/traceprobe"
)

// TestOpenTelemetryAcrossFunctions follows one request with
// PML_TRACING=otel: an HTTP API event carrying a caller's traceparent →
// the execute binary → a capability through the Lambda Invoke API → the
// capability binary → a remote MCP server. The OTLP receiver the test
// started sees one trace: the execution under the caller's span, the
// capability call under it, the capability run (exported by the other
// process) under that call, and its MCP call under the run; the MCP
// server got that call's span as traceparent in _meta and as a header.
// Without a traceparent the X-Ray header Lambda passes is the parent.
// The functions' logs carry their metrics as CloudWatch EMF.
func TestOpenTelemetryAcrossFunctions(t *testing.T) {
	recv := otlpreceiver.Start(t)
	probe := traceprobe.Start(t)
	logs := &syncbuf.Buffer{Max: 8 << 20}
	s := newStackWith(t, stackOptions{
		servers: []string{fmt.Sprintf(`{"name": "probe", "url": %q}`, probe.StreamableURL())},
		env:     []string{app.EnvTracing + "=otel", "OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.Endpoint()},
		logs:    logs,
	})
	save := approverEvent("POST", "/capabilities", `{"name": "relay:echo", "code": "return await mcp.probe.echo({text: args.text})"}`)
	if resp, _ := decodeHTTP(t, s.invoke(t, "execute", save, "")); resp.StatusCode != 201 {
		t.Fatalf("saving the capability: %+v", resp)
	}

	const (
		callerTrace = "0af7651916cd43dd8448eb211c80319c"
		callerSpan  = "b7ad6b7169203331"
		xrayHeader  = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	)
	for _, tc := range []struct {
		name        string
		traceparent string
		trace       string // the trace every span must be in
		parent      string // the execution span's parent
	}{
		{"traceparent", "00-" + callerTrace + "-" + callerSpan + "-01", callerTrace, callerSpan},
		{"X-Ray header", "", "5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(probe.Seen())
			ev := httpEvent("POST", "/execute", `{"code": "return (await mcp.relay.echo({text: 'hi'})).text"}`)
			if tc.traceparent != "" {
				ev.Headers["traceparent"] = tc.traceparent
				ev.Headers["tracestate"] = "caller=1"
			}
			resp, r := decodeHTTP(t, s.invoke(t, "execute", ev, xrayHeader))
			if resp.StatusCode != 200 || !r.OK || string(r.Result) != `"hi"` {
				t.Fatalf("execute: %d %s", resp.StatusCode, resp.Body)
			}
			// Both functions flushed before they answered; the receiver
			// may still be reading the second export.
			spans, ok := recv.Wait(10*time.Second, func(ss []otlpreceiver.Span) bool {
				n := 0
				for _, sp := range ss {
					if sp.TraceID == tc.trace {
						n++
					}
				}
				return n >= 4
			})
			by := map[string]otlpreceiver.Span{}
			for _, sp := range spans {
				if sp.TraceID == tc.trace {
					by[sp.Name] = sp
				}
			}
			root, call, run, leaf := by["execution"], by["relay:echo"], by["capability relay:echo"], by["probe:echo"]
			switch {
			case !ok:
				t.Fatalf("the receiver got %d spans, not 4 in trace %s: %+v", len(spans), tc.trace, spans)
			case root.ParentSpanID != tc.parent || root.Attributes["pml.execution_id"] != r.ExecutionID || root.Resource["faas.name"] != "execute":
				t.Fatalf("execution span %+v", root)
			case call.ParentSpanID != root.SpanID || call.Kind != "SPAN_KIND_CLIENT" || call.Attributes["pml.kind"] != "capability":
				t.Fatalf("capability call span %+v under %s", call, root.SpanID)
			case run.ParentSpanID != call.SpanID || run.Resource["faas.name"] != "capability" || run.Attributes["pml.parent_execution_id"] != r.ExecutionID:
				t.Fatalf("capability run span %+v under %s", run, call.SpanID)
			case leaf.ParentSpanID != run.SpanID || leaf.Attributes["pml.server"] != "probe" || leaf.Attributes["pml.ok"] != true:
				t.Fatalf("MCP call span %+v under %s", leaf, run.SpanID)
			}
			seen := probe.Seen()[before:]
			want := "00-" + tc.trace + "-" + leaf.SpanID + "-01"
			if len(seen) != 1 || seen[0].MetaParent != want || seen[0].HeaderParent != want {
				t.Fatalf("the MCP server saw %+v; want traceparent %s in _meta and the header", seen, want)
			}
			if tc.traceparent != "" && (seen[0].MetaState != "caller=1" || seen[0].HeaderState != "caller=1") {
				t.Fatalf("tracestate lost: %+v", seen[0])
			}
			// The trace record names the OpenTelemetry trace (in X-Ray's form).
			ex, _, err := s.traces.GetExecution(context.Background(), r.ExecutionID)
			if xr := "1-" + tc.trace[:8] + "-" + tc.trace[8:]; err != nil || ex.TraceID != xr {
				t.Fatalf("record trace_id %q (%v); want %s", ex.TraceID, err, xr)
			}
		})
	}

	// Each function wrote its metrics as EMF before it answered.
	emf := map[string]float64{}
	for line := range strings.Lines(logs.String()) {
		var d map[string]any
		if json.Unmarshal([]byte(line), &d) != nil || d["_aws"] == nil {
			continue
		}
		for _, m := range []string{metrics.MetricExecutions, metrics.MetricToolCalls, metrics.MetricColdStarts} {
			if v, ok := d[m].(float64); ok {
				emf[fmt.Sprint(d[metrics.DimFunction], " ", m, " ", d[metrics.DimServer])] += v
			}
		}
	}
	for k, min := range map[string]float64{
		"execute Executions <nil>":    2, // the two runs (the capability save runs nothing)
		"capability Executions <nil>": 2,
		"execute ToolCalls relay":     2,
		"capability ToolCalls probe":  2,
		"execute ColdStarts <nil>":    1,
		"capability ColdStarts <nil>": 1,
	} {
		if emf[k] < min {
			t.Errorf("EMF %s = %v; want at least %v (all: %v)", k, emf[k], min, emf)
		}
	}
}

// TestServeMetrics: pml serve's /metrics is Prometheus's text format, and
// its counters move with a scripted run: executions by outcome, their
// durations, tool calls by server, limit hits (a timeout, the memory
// limit, and a refusal by the server's budget), one cold start.
func TestServeMetrics(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	srv := startServe(t, nil, "--mcp", "demo="+demo.StreamableURL(), "--max-executions", "1", "--queue-wait", "50ms")
	before := scrape(t, srv.base)
	if got := value(before["pml_cold_starts_total"], nil); got != 1 {
		t.Fatalf("cold starts %v", got)
	}
	if value(before["pml_guest_compile_cache_total"], map[string]string{"result": "hit"})+
		value(before["pml_guest_compile_cache_total"], map[string]string{"result": "miss"}) != 1 {
		t.Fatalf("compile cache %v", before["pml_guest_compile_cache_total"])
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(code string, timeoutMS int) map[string]any {
		doc, err := execute(ctx, srv.base, code, timeoutMS)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	for range 3 {
		run(`return (await mcp.demo.word_count({text: "a b c"})).words`, 0)
	}
	run(`throw new Error("no")`, 0)
	run(`while (true) {}`, 300)
	run(`const a = []; while (true) a.push(new Array(1e5).fill(1))`, 20000)
	// Two at once past --max-executions 1: one is refused after 50 ms.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { run(`await new Promise(r => setTimeout(r, 1000)); return 1`, 0) })
	}
	wg.Wait()

	after := scrape(t, srv.base)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		delta  float64
	}{
		{"pml_executions_total", map[string]string{"outcome": "ok"}, 4},
		{"pml_executions_total", map[string]string{"outcome": "SCRIPT_ERROR"}, 1},
		{"pml_executions_total", map[string]string{"outcome": "TIMEOUT"}, 1},
		{"pml_executions_total", map[string]string{"outcome": "LIMIT_EXCEEDED"}, 1},
		{"pml_execution_duration_seconds", nil, 7},
		{"pml_execution_cpu_seconds", nil, 7},
		{"pml_tool_calls_total", map[string]string{"server": "demo", "outcome": "ok"}, 3},
		{"pml_tool_call_duration_seconds", map[string]string{"server": "demo"}, 3},
		{"pml_limit_hits_total", map[string]string{"limit": "timeout"}, 1},
		{"pml_limit_hits_total", map[string]string{"limit": "memory"}, 1},
		{"pml_limit_hits_total", map[string]string{"limit": "server_executions"}, 1},
		{"pml_cold_starts_total", nil, 0},
	} {
		if d := value(after[tc.name], tc.labels) - value(before[tc.name], tc.labels); d != tc.delta {
			t.Errorf("%s%v moved by %v; want %v", tc.name, tc.labels, d, tc.delta)
		}
	}
	// The CPU time of the looping script is most of its duration; that of
	// the waiting ones is not.
	if cpu := after["pml_execution_cpu_seconds"].Metric[0].Histogram.GetSampleSum(); cpu < 0.2 {
		t.Errorf("CPU seconds %v after a 300 ms busy loop", cpu)
	}
}

// scrape reads /metrics with the Prometheus text parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bufio.NewReader(resp.Body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value is the counter's value, or the histogram's sample count, of the
// family's series with exactly labels (0 when there is none).
func value(f *dto.MetricFamily, labels map[string]string) float64 {
	if f == nil {
		return 0
	}
next:
	for _, m := range f.Metric {
		if len(m.Label) != len(labels) {
			continue
		}
		for _, l := range m.Label {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}
