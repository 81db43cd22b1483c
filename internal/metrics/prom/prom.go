// Package prom keeps the service's metrics in a Prometheus registry and
// serves them in Prometheus's text format (`pml serve`'s /metrics). It is
// apart from package metrics so that only the commands that serve
// /metrics link Prometheus's client: its packages' initialisation (the
// default registry's collectors, procfs, runtime/metrics, expvar) is
// ~0.6 ms of every process start, which the Lambda functions, publishing
// EMF, would pay for nothing.
package prom

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pml-sandbox/pml/internal/metrics"
)

// Recorder keeps the metrics in a registry of its own (never the global
// one) and serves them in Prometheus's text format. It implements
// metrics.Exporter.
type Recorder struct {
	reg *prometheus.Registry

	executions *prometheus.CounterVec
	duration   prometheus.Histogram
	cpu        prometheus.Histogram
	calls      *prometheus.CounterVec
	callTime   *prometheus.HistogramVec
	limits     *prometheus.CounterVec
	suspends   prometheus.Counter
	resumes    prometheus.Counter
	cold       prometheus.Counter
	cache      *prometheus.CounterVec

	outcomes, servers, limitNames metrics.Bounded
}

// Histogram buckets, in seconds: executions from a few milliseconds (a
// script that returns at once) to the 60 s limit; CPU time from a
// millisecond; tool calls from a millisecond (in-memory tools) to their
// 30 s timeout.
var (
	durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	cpuBuckets      = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	callBuckets     = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
)

// New returns a recorder with every metric registered, and the Go
// runtime's and the process's collectors beside them.
func New() *Recorder {
	p := &Recorder{
		reg: prometheus.NewRegistry(),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pml_executions_total",
			Help: "Executions that finished, by outcome: ok or the error code."}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pml_execution_duration_seconds",
			Help: "Wall time of finished executions, over all their runs.", Buckets: durationBuckets}),
		cpu: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pml_execution_cpu_seconds",
			Help: "Time finished executions ran script code (their duration less waits for tool calls, timers and look-ups).", Buckets: cpuBuckets}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pml_tool_calls_total",
			Help: "Tool calls that ended, by server (a capability's namespace; _builtin for tools.* and calls past tool_calls) and outcome: ok or the error code."},
			[]string{"server", "outcome"}),
		callTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pml_tool_call_duration_seconds",
			Help: "Latency of tool calls, by server.", Buckets: callBuckets}, []string{"server"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pml_limit_hits_total",
			Help: "Executions that failed on a limit, and requests refused for want of room (server_executions, server_memory), by limit."},
			[]string{"limit"}),
		suspends: prometheus.NewCounter(prometheus.CounterOpts{Name: "pml_suspensions_total", Help: "Runs that suspended to wait for decisions."}),
		resumes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "pml_resumes_total", Help: "Runs that resumed a suspended execution."}),
		cold:     prometheus.NewCounter(prometheus.CounterOpts{Name: "pml_cold_starts_total", Help: "Processes started (1 for pml serve)."}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pml_guest_compile_cache_total",
			Help: "How the sandbox's compiled code was obtained at start: hit (loaded) or miss (compiled)."}, []string{"result"}),
	}
	p.reg.MustRegister(p.executions, p.duration, p.cpu, p.calls, p.callTime, p.limits, p.suspends, p.resumes, p.cold, p.cache,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return p
}

// NewExporter is New as a metrics.Exporter, the form
// app.Config.MetricsExporter takes.
func NewExporter() metrics.Exporter { return New() }

// Run implements metrics.Recorder.
func (p *Recorder) Run(r metrics.Run) {
	if r.Suspended {
		p.suspends.Inc()
	}
	if r.Resumed {
		p.resumes.Inc()
	}
	if !r.Finished {
		return
	}
	p.executions.WithLabelValues(p.outcomes.Value(r.Outcome)).Inc()
	p.duration.Observe(r.DurationMS / 1000)
	p.cpu.Observe(r.CPUMS / 1000)
	if r.Limit != "" {
		p.LimitHit(r.Limit)
	}
}

// Call implements metrics.Recorder.
func (p *Recorder) Call(c metrics.Call) {
	server := p.servers.Value(c.Server)
	p.calls.WithLabelValues(server, p.outcomes.Value(c.Outcome)).Add(float64(c.Count))
	if c.Count == 1 {
		p.callTime.WithLabelValues(server).Observe(c.DurationMS / 1000)
	}
}

// LimitHit implements metrics.Recorder.
func (p *Recorder) LimitHit(limit string) {
	p.limits.WithLabelValues(p.limitNames.Value(limit)).Inc()
}

// ColdStart implements metrics.Recorder.
func (p *Recorder) ColdStart() { p.cold.Inc() }

// GuestCache implements metrics.Recorder.
func (p *Recorder) GuestCache(hit bool) {
	if hit {
		p.cache.WithLabelValues("hit").Inc()
	} else {
		p.cache.WithLabelValues("miss").Inc()
	}
}

// Flush implements metrics.Recorder: Prometheus scrapes, nothing is pushed.
func (p *Recorder) Flush(context.Context) error { return nil }

// Handler serves the registry in Prometheus's text format (or
// OpenMetrics, when the scraper asks for it).
func (p *Recorder) Handler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Gatherer is the registry, for tests that read it without HTTP.
func (p *Recorder) Gatherer() prometheus.Gatherer { return p.reg }
