package metrics_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/metrics"
	"github.com/pml-sandbox/pml/internal/metrics/prom"
	"github.com/pml-sandbox/pml/internal/trace"
)

func TestRunOf(t *testing.T) {
	at := time.Now()
	suspend := trace.Event{Type: trace.EventSuspend, At: at}
	resume := trace.Event{Type: trace.EventResume, At: at}
	for _, tc := range []struct {
		name string
		ex   trace.Execution
		want metrics.Run
	}{
		{"ok", trace.Execution{Status: trace.StatusOK, DurationMS: 12, CPUMS: 3},
			metrics.Run{Finished: true, Outcome: "ok", DurationMS: 12, CPUMS: 3}},
		{"script error", trace.Execution{Status: trace.StatusError, ErrorCode: fault.ScriptError},
			metrics.Run{Finished: true, Outcome: "SCRIPT_ERROR"}},
		{"memory limit", trace.Execution{Status: trace.StatusError, ErrorCode: fault.LimitExceeded, Limit: fault.LimitMemory},
			metrics.Run{Finished: true, Outcome: "LIMIT_EXCEEDED", Limit: "memory"}},
		{"timeout", trace.Execution{Status: trace.StatusError, ErrorCode: fault.Timeout},
			metrics.Run{Finished: true, Outcome: "TIMEOUT", Limit: "timeout"}},
		{"error without code", trace.Execution{Status: trace.StatusError},
			metrics.Run{Finished: true, Outcome: "INTERNAL"}},
		{"first suspension", trace.Execution{Status: trace.StatusSuspended, Events: []trace.Event{suspend}},
			metrics.Run{Suspended: true}},
		{"resumed, suspended again", trace.Execution{Status: trace.StatusSuspended, Events: []trace.Event{suspend, resume, suspend}},
			metrics.Run{Suspended: true, Resumed: true}},
		{"resumed, finished", trace.Execution{Status: trace.StatusOK, DurationMS: 5, Events: []trace.Event{suspend, resume}},
			metrics.Run{Finished: true, Resumed: true, Outcome: "ok", DurationMS: 5}},
		{"resumed, failed", trace.Execution{Status: trace.StatusError, ErrorCode: fault.Rejected, Events: []trace.Event{suspend, resume}},
			metrics.Run{Finished: true, Resumed: true, Outcome: "REJECTED"}},
	} {
		if got := metrics.RunOf(tc.ex); got != tc.want {
			t.Errorf("%s: %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCallOf(t *testing.T) {
	for _, tc := range []struct {
		c    trace.Call
		want metrics.Call
	}{
		{trace.Call{Server: "kv", Tool: "get", OK: true, DurationMS: 2}, metrics.Call{Server: "kv", Outcome: "ok", DurationMS: 2, Count: 1}},
		{trace.Call{Server: "kv", Tool: "get", ErrorCode: fault.ToolError}, metrics.Call{Server: "kv", Outcome: "TOOL_ERROR", Count: 1}},
		{trace.Call{Tool: "tools.search", Kind: trace.KindBuiltin, OK: true}, metrics.Call{Server: "_builtin", Outcome: "ok", Count: 1}},
		{trace.Call{Tool: "*", Kind: trace.KindBuiltin, ErrorCode: fault.LimitExceeded, Count: 40}, metrics.Call{Server: "_builtin", Outcome: "LIMIT_EXCEEDED", Count: 40}},
	} {
		if got := metrics.CallOf(tc.c); got != tc.want {
			t.Errorf("%+v: %+v; want %+v", tc.c, got, tc.want)
		}
	}
}

// feed sends a small scripted workload through a recorder, as the trace
// records of a service would.
func feed(r metrics.Recorder) {
	s := metrics.Sink{R: r}
	ctx := context.Background()
	r.ColdStart()
	r.GuestCache(false)
	for range 3 {
		s.RecordCall(ctx, trace.Call{Server: "kv", Tool: "get", OK: true, DurationMS: 4})
		s.Record(ctx, trace.Execution{Status: trace.StatusOK, DurationMS: 20, CPUMS: 5}, nil)
	}
	s.RecordCall(ctx, trace.Call{Server: "kv", Tool: "get", ErrorCode: fault.Timeout, DurationMS: 30000})
	s.Record(ctx, trace.Execution{Status: trace.StatusError, ErrorCode: fault.LimitExceeded, Limit: fault.LimitMemory, DurationMS: 80, CPUMS: 70}, nil)
	s.Record(ctx, trace.Execution{Status: trace.StatusSuspended, Events: []trace.Event{{Type: trace.EventSuspend}}}, nil)
	s.Record(ctx, trace.Execution{Status: trace.StatusOK, Events: []trace.Event{{Type: trace.EventSuspend}, {Type: trace.EventResume}}}, nil)
	r.LimitHit(fault.LimitServerExecutions)
}

func TestPrometheus(t *testing.T) {
	p := prom.New()
	feed(p)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not Prometheus's text format: %v", err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"pml_executions_total", map[string]string{"outcome": "ok"}, 4},
		{"pml_executions_total", map[string]string{"outcome": "LIMIT_EXCEEDED"}, 1},
		{"pml_tool_calls_total", map[string]string{"server": "kv", "outcome": "ok"}, 3},
		{"pml_tool_calls_total", map[string]string{"server": "kv", "outcome": "TIMEOUT"}, 1},
		{"pml_limit_hits_total", map[string]string{"limit": "memory"}, 1},
		{"pml_limit_hits_total", map[string]string{"limit": "server_executions"}, 1},
		{"pml_suspensions_total", nil, 1},
		{"pml_resumes_total", nil, 1},
		{"pml_cold_starts_total", nil, 1},
		{"pml_guest_compile_cache_total", map[string]string{"result": "miss"}, 1},
		{"pml_execution_duration_seconds", nil, 5}, // sample count
		{"pml_execution_cpu_seconds", nil, 5},
		{"pml_tool_call_duration_seconds", map[string]string{"server": "kv"}, 4},
	} {
		if got := value(fams[tc.name], tc.labels); got != tc.want {
			t.Errorf("%s%v = %v; want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if fams["go_goroutines"] == nil || fams["process_resident_memory_bytes"] == nil {
		t.Error("no Go runtime or process metrics")
	}
}

// value is the counter's value, or the histogram's sample count, of the
// family's metric with labels.
func value(f *dto.MetricFamily, labels map[string]string) float64 {
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		if len(m.Label) != len(labels) {
			continue
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

// TestLabelValuesAreBounded: a script that reaches ten thousand servers
// (capability namespaces) and a flood of odd outcomes and limits leave at
// most the bound's series behind, the rest counted as _other.
func TestLabelValuesAreBounded(t *testing.T) {
	p := prom.New()
	var buf bytes.Buffer
	e := metrics.NewEMF(&buf, "fn")
	for i := range 10000 {
		c := metrics.Call{Server: fmt.Sprintf("ns%d", i), Outcome: fmt.Sprintf("CODE_%d", i), Count: 1}
		p.Call(c)
		e.Call(c)
		p.LimitHit(fmt.Sprintf("limit_%d", i))
	}
	fams, err := p.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range fams {
		switch f.GetName() {
		case "pml_tool_calls_total", "pml_tool_call_duration_seconds", "pml_limit_hits_total":
			if len(f.Metric) > 101 {
				t.Errorf("%s has %d series", f.GetName(), len(f.Metric))
			}
		}
		if f.GetName() == "pml_tool_calls_total" {
			for _, m := range f.Metric {
				total += m.Counter.GetValue()
			}
		}
	}
	if total != 10000 {
		t.Errorf("calls counted %v; want 10000", total)
	}
	if err := e.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	servers := map[string]bool{}
	for line := range strings.Lines(buf.String()) {
		var d map[string]any
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatal(err)
		}
		servers[fmt.Sprint(d[metrics.DimServer])] = true
	}
	if len(servers) > 101 || !servers[metrics.OtherValue] {
		t.Errorf("EMF wrote %d servers", len(servers))
	}
}

// emfDoc is an EMF document as CloudWatch reads it.
type emfDoc struct {
	AWS struct {
		Timestamp         int64
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	} `json:"_aws"`
	Root map[string]any `json:"-"`
}

// TestEMF: every line is an EMF document whose directive names only root
// members, metric values are numbers or at most 100 numbers, and the
// counts add up to the workload's.
func TestEMF(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.NewEMF(&buf, "stack-execute")
	feed(e)
	// More durations than one document may hold.
	for range 150 {
		e.Run(metrics.Run{Finished: true, Outcome: "ok", DurationMS: 1})
	}
	if err := e.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	values := map[string]int{}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var d emfDoc
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("%s: %v", sc.Bytes(), err)
		}
		_ = json.Unmarshal(sc.Bytes(), &d.Root)
		if d.AWS.Timestamp == 0 || len(d.AWS.CloudWatchMetrics) != 1 {
			t.Fatalf("directive %s", sc.Bytes())
		}
		dir := d.AWS.CloudWatchMetrics[0]
		if dir.Namespace != metrics.Namespace || d.Root[metrics.DimFunction] != "stack-execute" {
			t.Fatalf("document %s", sc.Bytes())
		}
		for _, set := range dir.Dimensions {
			if len(set) == 0 || set[0] != metrics.DimFunction {
				t.Fatalf("dimension set %v", set)
			}
			for _, name := range set {
				if _, ok := d.Root[name].(string); !ok {
					t.Fatalf("dimension %s has no string value in %s", name, sc.Bytes())
				}
			}
		}
		key := func(name string) string {
			k := name
			for _, dim := range []string{metrics.DimOutcome, metrics.DimServer, metrics.DimLimit} {
				if v, ok := d.Root[dim].(string); ok {
					k += " " + dim + "=" + v
				}
			}
			return k
		}
		for _, m := range dir.Metrics {
			switch v := d.Root[m.Name].(type) {
			case float64:
				sums[key(m.Name)] += v
			case []any:
				if len(v) == 0 || len(v) > 100 {
					t.Fatalf("%s holds %d values", m.Name, len(v))
				}
				values[m.Name] += len(v)
			default:
				t.Fatalf("metric %s is %T in %s", m.Name, v, sc.Bytes())
			}
		}
	}
	for k, want := range map[string]float64{
		"Executions Outcome=ok":               154,
		"Executions Outcome=LIMIT_EXCEEDED":   1,
		"ExecutionErrors":                     1,
		"ToolCalls Outcome=ok Server=kv":      3,
		"ToolCalls Outcome=TIMEOUT Server=kv": 1,
		"LimitHits Limit=memory":              1,
		"LimitHits Limit=server_executions":   1,
		"Suspensions":                         1,
		"Resumes":                             1,
		"ColdStarts":                          1,
		"CompileCacheMisses":                  1,
	} {
		if sums[k] != want {
			t.Errorf("%s = %v; want %v (all: %v)", k, sums[k], want, sums)
		}
	}
	if values[metrics.MetricExecutionDuration] != 155 || values[metrics.MetricToolCallDuration] != 4 {
		t.Errorf("values %v", values)
	}
	// Flushed: nothing is written twice.
	buf.Reset()
	if err := e.Flush(context.Background()); err != nil || buf.Len() != 0 {
		t.Fatalf("second flush wrote %q, %v", buf.String(), err)
	}
}
