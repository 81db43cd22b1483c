package metrics

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of the functions' metrics.
const Namespace = "PMLSandbox"

// The CloudWatch metric names and dimensions EMF writes (template.yaml's
// dashboard and alarm read them).
const (
	MetricExecutions         = "Executions"         // finished executions; also by Outcome
	MetricExecutionErrors    = "ExecutionErrors"    // finished executions that failed
	MetricExecutionDuration  = "ExecutionDuration"  // ms, over all runs
	MetricExecutionCPU       = "ExecutionCPU"       // ms of script code
	MetricToolCalls          = "ToolCalls"          // by Server, and by Server and Outcome
	MetricToolCallDuration   = "ToolCallDuration"   // ms, by Server
	MetricLimitHits          = "LimitHits"          // by Limit
	MetricSuspensions        = "Suspensions"        // runs that suspended
	MetricResumes            = "Resumes"            // runs that resumed
	MetricColdStarts         = "ColdStarts"         // containers started
	MetricCompileCacheMisses = "CompileCacheMisses" // starts that compiled the guest

	DimFunction = "FunctionName"
	DimOutcome  = "Outcome"
	DimServer   = "Server"
	DimLimit    = "Limit"
)

// maxValues is the most values one metric of one document may hold
// (EMF's limit): a series that reaches it is written at once.
const maxValues = 100

// EMF buffers the events between flushes and writes them on Flush as
// CloudWatch embedded metric format documents, one JSON line each, to a
// Lambda function's standard output: its log, which CloudWatch turns into
// metrics without an API call. Every document carries the function's name
// as FunctionName.
type EMF struct {
	function string
	now      func() time.Time

	mu   sync.Mutex
	w    io.Writer
	docs map[docKey]*doc

	outcomes, servers, limitNames Bounded
}

// docKey is one set of dimension values: the dimension names (after
// FunctionName) and their values.
type docKey struct {
	dims string // "", "Outcome", "Server", "Server,Outcome", "Limit"
	a, b string
}

type doc struct {
	counts map[string]float64
	values map[string][]float64
}

// NewEMF writes to w (the function's standard output) with function as
// every document's FunctionName.
func NewEMF(w io.Writer, function string) *EMF {
	return &EMF{w: w, function: function, now: time.Now, docs: map[docKey]*doc{}}
}

func (e *EMF) docLocked(k docKey) *doc {
	d := e.docs[k]
	if d == nil {
		d = &doc{counts: map[string]float64{}, values: map[string][]float64{}}
		e.docs[k] = d
	}
	return d
}

func (e *EMF) addLocked(k docKey, metric string, n float64) { e.docLocked(k).counts[metric] += n }

func (e *EMF) observeLocked(k docKey, metric string, v float64) {
	d := e.docLocked(k)
	d.values[metric] = append(d.values[metric], v)
	if len(d.values[metric]) >= maxValues {
		e.writeLocked(k, d)
		delete(e.docs, k)
	}
}

// Run implements Recorder.
func (e *EMF) Run(r Run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn := docKey{}
	if r.Suspended {
		e.addLocked(fn, MetricSuspensions, 1)
	}
	if r.Resumed {
		e.addLocked(fn, MetricResumes, 1)
	}
	if !r.Finished {
		return
	}
	// Executions per function is the sum over outcomes: the Outcome
	// documents carry both dimension sets.
	e.addLocked(docKey{dims: DimOutcome, a: e.outcomes.Value(r.Outcome)}, MetricExecutions, 1)
	if r.Outcome != OutcomeOK {
		e.addLocked(fn, MetricExecutionErrors, 1)
	} else {
		e.addLocked(fn, MetricExecutionErrors, 0) // the metric has data, and the error rate a value, when nothing failed
	}
	if r.Limit != "" {
		e.addLocked(docKey{dims: DimLimit, a: e.limitNames.Value(r.Limit)}, MetricLimitHits, 1)
	}
	e.observeLocked(fn, MetricExecutionDuration, r.DurationMS)
	e.observeLocked(fn, MetricExecutionCPU, r.CPUMS)
}

// Call implements Recorder.
func (e *EMF) Call(c Call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	server := e.servers.Value(c.Server)
	e.addLocked(docKey{dims: DimServer + "," + DimOutcome, a: server, b: e.outcomes.Value(c.Outcome)}, MetricToolCalls, float64(c.Count))
	if c.Count == 1 {
		e.observeLocked(docKey{dims: DimServer, a: server}, MetricToolCallDuration, c.DurationMS)
	}
}

// LimitHit implements Recorder.
func (e *EMF) LimitHit(limit string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addLocked(docKey{dims: DimLimit, a: e.limitNames.Value(limit)}, MetricLimitHits, 1)
}

// ColdStart implements Recorder.
func (e *EMF) ColdStart() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addLocked(docKey{}, MetricColdStarts, 1)
}

// GuestCache implements Recorder.
func (e *EMF) GuestCache(hit bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 1.0
	if hit {
		n = 0
	}
	e.addLocked(docKey{}, MetricCompileCacheMisses, n)
}

// Flush implements Recorder: it writes one document per set of
// dimension values, and forgets them.
func (e *EMF) Flush(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := make([]docKey, 0, len(e.docs))
	for k := range e.docs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y docKey) int {
		return cmp.Or(cmp.Compare(x.dims, y.dims), cmp.Compare(x.a, y.a), cmp.Compare(x.b, y.b))
	})
	var err error
	for _, k := range keys {
		if werr := e.writeLocked(k, e.docs[k]); werr != nil && err == nil {
			err = werr
		}
	}
	clear(e.docs)
	return err
}

// emfMetric is one entry of a directive's Metrics.
type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

func unit(metric string) string {
	switch metric {
	case MetricExecutionDuration, MetricExecutionCPU, MetricToolCallDuration:
		return "Milliseconds"
	}
	return "Count"
}

// writeLocked writes one document: the dimension values and metric values
// at its root, and the directive naming them under _aws.
func (e *EMF) writeLocked(k docKey, d *doc) error {
	root := map[string]any{DimFunction: e.function}
	dims := [][]string{{DimFunction}}
	switch k.dims {
	case DimOutcome:
		// Executions by outcome, and their sum per function.
		root[DimOutcome] = k.a
		dims = [][]string{{DimFunction}, {DimFunction, DimOutcome}}
	case DimServer:
		root[DimServer] = k.a
		dims = [][]string{{DimFunction, DimServer}}
	case DimServer + "," + DimOutcome:
		// Calls by server and outcome, by server, and per function.
		root[DimServer], root[DimOutcome] = k.a, k.b
		dims = [][]string{{DimFunction}, {DimFunction, DimServer}, {DimFunction, DimServer, DimOutcome}}
	case DimLimit:
		root[DimLimit] = k.a
		dims = [][]string{{DimFunction, DimLimit}}
	}
	var metrics []emfMetric
	for name, v := range d.counts {
		root[name] = v
		metrics = append(metrics, emfMetric{Name: name, Unit: unit(name)})
	}
	for name, vs := range d.values {
		root[name] = vs
		metrics = append(metrics, emfMetric{Name: name, Unit: unit(name)})
	}
	if len(metrics) == 0 {
		return nil
	}
	slices.SortFunc(metrics, func(x, y emfMetric) int { return cmp.Compare(x.Name, y.Name) })
	root["_aws"] = map[string]any{
		"Timestamp": e.now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace": Namespace, "Dimensions": dims, "Metrics": metrics,
		}},
	}
	b, err := json.Marshal(root)
	if err != nil {
		return err
	}
	_, err = e.w.Write(append(b, '\n'))
	return err
}
