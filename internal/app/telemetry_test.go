package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/metrics/prom"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	"github.com/pml-sandbox/pml/internal/testutil/otlpreceiver"
	"github.com/pml-sandbox/pml/internal/testutil/traceprobe"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// TestOpenTelemetryTrace: with PML_TRACING=otel an execution under a
// caller's traceparent, the capability it calls (run in process) and the
// MCP server that capability calls are one trace, exported over OTLP by
// the flush; the server got the tool call's span as traceparent.
func TestOpenTelemetryTrace(t *testing.T) {
	cleanEnv(t)
	recv := otlpreceiver.Start(t)
	probe := traceprobe.Start(t)
	t.Setenv(app.EnvTracing, "otel")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.Endpoint())
	t.Setenv(app.EnvMCPServers, `{"servers": [{"name": "probe", "url": "`+probe.StreamableURL()+`"}]}`)
	ctx := context.Background()
	a, err := app.FromEnv(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	if _, err := a.Registry.Save(ctx, capability.Capability{Name: "relay:echo", Code: "return await mcp.probe.echo({text: args.text})"}, nil); err != nil {
		t.Fatal(err)
	}
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp := a.Service.Execute(tracectx.Extract(ctx, caller, ""), execution.Request{Code: `return (await mcp.relay.echo({text: "hi"})).text`})
	if !resp.OK || string(resp.Result) != `"hi"` {
		t.Fatalf("execute: %+v", resp.Error)
	}
	if err := a.Service.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	by := map[string]otlpreceiver.Span{}
	for _, s := range spans {
		if s.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("span %s in trace %s", s.Name, s.TraceID)
		}
		by[s.Name] = s
	}
	root, call, run, leaf := by["execution"], by["relay:echo"], by["capability relay:echo"], by["probe:echo"]
	switch {
	case len(spans) != 4:
		t.Fatalf("spans %+v", spans)
	case root.ParentSpanID != "00f067aa0ba902b7":
		t.Fatalf("the execution is not under the caller: %+v", root)
	case call.ParentSpanID != root.SpanID || run.ParentSpanID != call.SpanID || leaf.ParentSpanID != run.SpanID:
		t.Fatalf("not one tree: %+v", spans)
	case run.Attributes["pml.parent_execution_id"] != resp.ExecutionID || call.Attributes["pml.kind"] != "capability":
		t.Fatalf("attributes: %+v %+v", run.Attributes, call.Attributes)
	}
	seen := probe.Seen()
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + leaf.SpanID + "-01"
	if len(seen) != 1 || seen[0].MetaParent != want || seen[0].HeaderParent != want {
		t.Fatalf("the server saw %+v; want traceparent %s", seen, want)
	}
}

// TestEMFMetrics: a function's service writes its metrics as EMF lines
// when it flushes, the cold start and the compile cache among them.
func TestEMFMetrics(t *testing.T) {
	cleanEnv(t)
	t.Setenv(app.EnvMetrics, "emf")
	t.Setenv(app.EnvLambdaFunction, "stack-execute")
	cfg, err := app.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cfg.MetricsOutput = &out
	ctx := context.Background()
	a, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	a.Service.Execute(ctx, execution.Request{Code: "return 1"})
	a.Service.Execute(ctx, execution.Request{Code: "throw new Error('no')"})
	if out.Len() != 0 {
		t.Fatalf("metrics written before the flush: %s", out.String())
	}
	if err := a.Service.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for line := range strings.Lines(out.String()) {
		var d map[string]any
		if err := json.Unmarshal([]byte(line), &d); err != nil || d["_aws"] == nil || d["FunctionName"] != "stack-execute" {
			t.Fatalf("not an EMF document: %s (%v)", line, err)
		}
		for _, k := range []string{"Executions", "ExecutionErrors", "ColdStarts", "CompileCacheMisses"} {
			if v, ok := d[k].(float64); ok {
				got[k] += v
			}
		}
	}
	if got["Executions"] != 2 || got["ExecutionErrors"] != 1 || got["ColdStarts"] != 1 {
		t.Fatalf("metrics %v in %s", got, out.String())
	}
}

// TestPrometheusMetricsNeedAnExporter: PML_METRICS=prometheus is refused,
// with a clear error, by a process that links no exporter (the Lambda
// functions: nothing there could scrape /metrics); with one, the app
// serves what it counted.
func TestPrometheusMetricsNeedAnExporter(t *testing.T) {
	cleanEnv(t)
	t.Setenv(app.EnvMetrics, "prometheus")
	cfg, err := app.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	var f *fault.Error
	if err == nil {
		a.Close(ctx)
		t.Fatal("prometheus metrics opened without an exporter")
	}
	if !errors.As(err, &f) || f.Code != fault.InvalidRequest || !strings.Contains(err.Error(), "pml serve") {
		t.Fatalf("error %v; want an invalid request that says where /metrics is served", err)
	}

	cfg.MetricsExporter = prom.NewExporter
	a, err = app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	a.Service.Execute(ctx, execution.Request{Code: "return 1"})
	h := a.MetricsHandler()
	if h == nil {
		t.Fatal("no /metrics handler")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `pml_executions_total{outcome="ok"} 1`) {
		t.Fatalf("/metrics:\n%s", rec.Body.String())
	}
}

// TestMCPEndpointJoinsTheCallersTrace: execute_code over /mcp runs under
// the trace context its request carries, in _meta (MCP 2026-07-28) or as
// the traceparent header; a malformed one is ignored (a new trace).
func TestMCPEndpointJoinsTheCallersTrace(t *testing.T) {
	cleanEnv(t)
	recv := otlpreceiver.Start(t)
	t.Setenv(app.EnvTracing, "otel")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.Endpoint())
	t.Setenv(app.EnvDemoTools, "on")
	ctx := context.Background()
	a, err := app.FromEnv(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	srv := httptest.NewServer(a.HTTPHandler(httpapi.Options{Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct {
		name         string
		meta, header string
		parent       string // the execution span's parent, "" for a new trace
	}{
		{"_meta", "00-" + trace + "-00f067aa0ba902b7-01", "", "00f067aa0ba902b7"},
		{"header", "", "00-" + trace + "-00f067aa0ba902b8-01", "00f067aa0ba902b8"},
		{"_meta over header", "00-" + trace + "-00f067aa0ba902b9-01", "00-" + trace + "-00f067aa0ba902ba-01", "00f067aa0ba902b9"},
		{"malformed", "00-" + trace + "-zz-01", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []transport.StreamableHTTPCOption
			if tc.header != "" {
				opts = append(opts, transport.WithHTTPHeaders(map[string]string{"traceparent": tc.header}))
			}
			c, err := client.NewStreamableHttpClient(srv.URL+"/mcp", opts...)
			if err != nil {
				t.Fatal(err)
			}
			mcptest.Connect(t, c, "")
			var req mcp.CallToolRequest
			req.Params.Name = "execute_code"
			req.Params.Arguments = map[string]any{"code": "return (await mcp.demo.add({a: 1, b: 2}))"}
			if tc.meta != "" {
				req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": tc.meta}}
			}
			res, err := c.CallTool(ctx, req)
			if err != nil || res.IsError {
				t.Fatalf("execute_code: %+v %v", res, err)
			}
			doc, _ := res.StructuredContent.(map[string]any)
			id, _ := doc["execution_id"].(string)
			spans, ok := recv.Wait(10*time.Second, func(ss []otlpreceiver.Span) bool {
				for _, s := range ss {
					if s.Attributes["pml.execution_id"] == id && s.Name == "execution" {
						return true
					}
				}
				return false
			})
			if !ok {
				t.Fatalf("no span of %s in %+v", id, spans)
			}
			for _, s := range spans {
				if s.Attributes["pml.execution_id"] != id || s.Name != "execution" {
					continue
				}
				if s.ParentSpanID != tc.parent || (tc.parent != "" && s.TraceID != trace) || (tc.parent == "" && s.TraceID == trace) {
					t.Fatalf("execution span in trace %s under %q; want under %q", s.TraceID, s.ParentSpanID, tc.parent)
				}
			}
		})
	}
}

// TestTraceparentPassesThroughWithoutTracing: with tracing off, a caller's
// traceparent reaches the MCP servers unchanged, and a request without one
// sends none.
func TestTraceparentPassesThroughWithoutTracing(t *testing.T) {
	cleanEnv(t)
	probe := traceprobe.Start(t)
	t.Setenv(app.EnvMCPServers, `{"servers": [{"name": "probe", "url": "`+probe.StreamableURL()+`"}]}`)
	ctx := context.Background()
	a, err := app.FromEnv(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	srv := httptest.NewServer(a.HTTPHandler(httpapi.Options{Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tp := range []string{caller, ""} {
		req, _ := http.NewRequest("POST", srv.URL+"/execute", strings.NewReader(`{"code": "return await mcp.probe.echo({text: 'x'})"}`))
		req.Header.Set("Content-Type", "application/json")
		if tp != "" {
			req.Header.Set("traceparent", tp)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen := probe.Seen()
		if resp.StatusCode != 200 || len(seen) == 0 || seen[len(seen)-1].HeaderParent != tp || seen[len(seen)-1].MetaParent != tp {
			t.Fatalf("%d; the server saw %+v, want traceparent %q", resp.StatusCode, seen, tp)
		}
	}
}
