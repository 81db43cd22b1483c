package app

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/metrics"
	"github.com/pml-sandbox/pml/internal/otelsink"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/xraysink"
)

// Where traces go besides the store (Config.Tracing, PML_TRACING).
const (
	TracingXRay = "xray" // X-Ray segments over UDP to the daemon (the template's default)
	TracingOTel = "otel" // OpenTelemetry spans over OTLP (OTEL_EXPORTER_OTLP_* configure the exporter)
	TracingOff  = "off"
)

// How metrics are published (Config.Metrics, PML_METRICS).
const (
	MetricsEMF        = "emf"        // CloudWatch embedded metric format on standard output (the functions' default)
	MetricsPrometheus = "prometheus" // served at /metrics (pml serve's default)
	MetricsOff        = "off"
)

// TracingFromEnv is PML_TRACING, or def when it is unset.
func TracingFromEnv(def string) (string, error) {
	v := strings.ToLower(os.Getenv(EnvTracing))
	switch v {
	case "":
		return def, nil
	case TracingXRay, TracingOTel, TracingOff:
		return v, nil
	}
	return "", fault.New(fault.InvalidRequest, "%s must be xray, otel or off, not %q", EnvTracing, os.Getenv(EnvTracing))
}

// MetricsFromEnv is PML_METRICS, or def when it is unset.
func MetricsFromEnv(def string) (string, error) {
	v := strings.ToLower(os.Getenv(EnvMetrics))
	switch v {
	case "":
		return def, nil
	case MetricsEMF, MetricsPrometheus, MetricsOff:
		return v, nil
	}
	return "", fault.New(fault.InvalidRequest, "%s must be emf, prometheus or off, not %q", EnvMetrics, os.Getenv(EnvMetrics))
}

// defaultTracing is X-Ray where its daemon is (a Lambda function, or a
// host that names one), else nothing.
func defaultTracing() string {
	if os.Getenv(EnvLambdaTaskRoot) != "" || os.Getenv(EnvXRayDaemon) != "" {
		return TracingXRay
	}
	return TracingOff
}

// defaultMetrics is EMF in a Lambda function, else nothing.
func defaultMetrics() string {
	if os.Getenv(EnvLambdaTaskRoot) != "" {
		return MetricsEMF
	}
	return MetricsOff
}

// openTracing returns the sink traces go to besides the store, nil for
// none.
func (a *App) openTracing(ctx context.Context, tracing string) (trace.Sink, error) {
	switch tracing {
	case TracingXRay:
		s, err := xraysink.New("pml-sandbox")
		if err != nil {
			return nil, err
		}
		return s, nil
	case TracingOTel:
		s, err := otelsink.New(ctx, otelsink.Options{Service: "pml-sandbox"})
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, s.Close)
		return s, nil
	case TracingOff, "":
		return nil, nil
	}
	return nil, fault.New(fault.InvalidRequest, "tracing %q: want %s, %s or %s", tracing, TracingXRay, TracingOTel, TracingOff)
}

// openMetrics returns the recorder metrics go to, nil for none. EMF
// writes to w, the function's standard output; MetricsPrometheus is
// newExporter's, which only the processes that serve /metrics link.
func openMetrics(format string, w io.Writer, newExporter func() metrics.Exporter) (metrics.Recorder, error) {
	switch format {
	case MetricsEMF:
		fn := os.Getenv(EnvLambdaFunction)
		if fn == "" {
			fn = "pml"
		}
		return metrics.NewEMF(w, fn), nil
	case MetricsPrometheus:
		if newExporter == nil {
			return nil, fault.New(fault.InvalidRequest, "metrics %q: this process serves no /metrics to scrape (pml serve does); want %s or %s",
				format, MetricsEMF, MetricsOff)
		}
		return newExporter(), nil
	case MetricsOff, "":
		return nil, nil
	}
	return nil, fault.New(fault.InvalidRequest, "metrics %q: want %s, %s or %s", format, MetricsEMF, MetricsPrometheus, MetricsOff)
}

// MetricsHandler serves the metrics in Prometheus's text format when the
// app publishes them so (pml serve's /metrics), else nil.
func (a *App) MetricsHandler() http.Handler {
	if e, ok := a.Metrics.(metrics.Exporter); ok {
		return e.Handler()
	}
	return nil
}

// LimitHit counts a request refused in front of the service (pml serve's
// budget), when the app keeps metrics.
func (a *App) LimitHit(limit string) {
	if a.Metrics != nil {
		a.Metrics.LimitHit(limit)
	}
}

// sinks joins the sinks that are set.
func sinks(all ...trace.Sink) trace.Sink {
	var out xraysink.Multi
	for _, s := range all {
		if s != nil {
			out = append(out, s)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return out
}
