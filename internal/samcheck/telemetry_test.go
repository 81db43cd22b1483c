package samcheck

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/metrics"
)

// TestTelemetry pins what template.yaml does for traces and metrics: X-Ray
// stays the default of PML_TRACING, whose values are app's; the functions
// publish metrics as EMF; the dashboard's body is JSON reading the metrics
// internal/metrics writes; the one alarm is on the execute function's
// error rate, from the same metrics.
func TestTelemetry(t *testing.T) {
	data, err := os.ReadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Parameters map[string]map[string]any
		Globals    struct{ Function map[string]any }
		Resources  map[string]map[string]any
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	tracing := doc.Parameters["Tracing"]
	allowed, _ := json.Marshal(tracing["AllowedValues"])
	if tracing["Default"] != app.TracingXRay || string(allowed) != `["xray","otel","off"]` {
		t.Errorf("Tracing parameter %v; want default xray of xray, otel, off", tracing)
	}
	env, _ := doc.Globals.Function["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	if ref, _ := vars[app.EnvTracing].(map[string]any); ref["Ref"] != "Tracing" {
		t.Errorf("Globals %s = %v; want !Ref Tracing", app.EnvTracing, vars[app.EnvTracing])
	}
	if vars[app.EnvMetrics] != app.MetricsEMF {
		t.Errorf("Globals %s = %v; want %s", app.EnvMetrics, vars[app.EnvMetrics], app.MetricsEMF)
	}
	if _, ok := vars["OTEL_EXPORTER_OTLP_ENDPOINT"]; !ok {
		t.Error("Globals set no OTEL_EXPORTER_OTLP_ENDPOINT")
	}

	var dashboards, alarms []string
	for id, r := range doc.Resources {
		switch r["Type"] {
		case "AWS::CloudWatch::Dashboard":
			dashboards = append(dashboards, id)
		case "AWS::CloudWatch::Alarm":
			alarms = append(alarms, id)
		}
	}
	if !slices.Equal(dashboards, []string{"Dashboard"}) || !slices.Equal(alarms, []string{"ErrorRateAlarm"}) {
		t.Fatalf("dashboards %v, alarms %v; want Dashboard and ErrorRateAlarm", dashboards, alarms)
	}

	// The dashboard: JSON once substituted, naming only metrics EMF writes.
	props, _ := doc.Resources["Dashboard"]["Properties"].(map[string]any)
	sub, _ := props["DashboardBody"].(map[string]any)["Fn::Sub"].([]any)
	if len(sub) != 2 {
		t.Fatalf("DashboardBody is not a !Sub with variables: %v", props["DashboardBody"])
	}
	body := regexp.MustCompile(`\$\{[^}]+\}`).ReplaceAllString(sub[0].(string), "x")
	var dash struct {
		Widgets []struct {
			Properties struct {
				Metrics [][]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &dash); err != nil || len(dash.Widgets) == 0 {
		t.Fatalf("DashboardBody is not JSON: %v", err)
	}
	known := []string{metrics.MetricExecutions, metrics.MetricExecutionErrors, metrics.MetricExecutionDuration, metrics.MetricExecutionCPU,
		metrics.MetricToolCalls, metrics.MetricToolCallDuration, metrics.MetricLimitHits, metrics.MetricSuspensions, metrics.MetricResumes,
		metrics.MetricColdStarts, metrics.MetricCompileCacheMisses}
	named := map[string]bool{}
	for _, w := range dash.Widgets {
		for _, m := range w.Properties.Metrics {
			if ns, ok := m[0].(string); ok && ns != "..." {
				if ns != metrics.Namespace || !slices.Contains(known, m[1].(string)) || m[2] != metrics.DimFunction {
					t.Errorf("dashboard metric %v", m)
				}
				named[m[1].(string)] = true
			}
			if e, ok := m[0].(map[string]any); ok {
				expr, _ := e["expression"].(string)
				if name := regexp.MustCompile(`MetricName="(\w+)"`).FindStringSubmatch(expr); strings.HasPrefix(expr, "SEARCH") &&
					(name == nil || !slices.Contains(known, name[1]) || !strings.Contains(expr, "{"+metrics.Namespace+","+metrics.DimFunction)) {
					t.Errorf("dashboard search %q", expr)
				} else if name != nil {
					named[name[1]] = true
				}
			}
		}
	}
	for _, m := range known {
		if !named[m] {
			t.Errorf("the dashboard shows no %s", m)
		}
	}

	// The alarm: errors over executions of the execute function.
	aprops, _ := doc.Resources["ErrorRateAlarm"]["Properties"].(map[string]any)
	stats := map[string]bool{}
	for _, q := range aprops["Metrics"].([]any) {
		m, _ := q.(map[string]any)
		st, _ := m["MetricStat"].(map[string]any)
		metric, _ := st["Metric"].(map[string]any)
		if metric == nil {
			continue
		}
		dims, _ := json.Marshal(metric["Dimensions"])
		if metric["Namespace"] != metrics.Namespace || string(dims) != `[{"Name":"FunctionName","Value":{"Ref":"ExecuteFunction"}}]` {
			t.Errorf("alarm metric %v", metric)
		}
		stats[metric["MetricName"].(string)] = true
	}
	if !stats[metrics.MetricExecutionErrors] || !stats[metrics.MetricExecutions] || len(stats) != 2 {
		t.Errorf("alarm reads %v; want %s and %s", stats, metrics.MetricExecutionErrors, metrics.MetricExecutions)
	}
}
