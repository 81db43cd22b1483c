// Package xraysink sends execution traces to AWS X-Ray with aws-xray-sdk-go:
// one (sub)segment per execution with a subsegment per tool call, annotated
// with server, tool, ok and error_code so traces can be filtered in the
// console. It sits behind trace.Sink, like every other trace destination: the
// X-Ray SDK is in maintenance mode, and an OpenTelemetry sink can replace
// this package without touching the rest.
//
// Records arrive after the execution, with their real start times and
// durations, so the documents are built from them and handed to the SDK's
// UDP emitter rather than timed live.
package xraysink

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-xray-sdk-go/header"
	"github.com/aws/aws-xray-sdk-go/instrumentation/awsv2"
	"github.com/aws/aws-xray-sdk-go/strategy/ctxmissing"
	"github.com/aws/aws-xray-sdk-go/xray"

	"github.com/pml-sandbox/pml/internal/trace"
)

// Sink emits X-Ray documents.
type Sink struct {
	emitter *xray.DefaultEmitter
	service string
}

// New sends to the daemon at AWS_XRAY_DAEMON_ADDRESS (default
// 127.0.0.1:2000). An execution that ran under a trace header with a parent
// (as in Lambda) becomes a subsegment of that segment; otherwise it is a
// segment of its own named service.
func New(service string) (*Sink, error) {
	addr := os.Getenv("AWS_XRAY_DAEMON_ADDRESS")
	if addr == "" {
		addr = "127.0.0.1:2000"
	}
	// The variable may list "tcp:host:port udp:host:port"; UDP is what
	// segments travel over.
	for _, part := range strings.Fields(addr) {
		if v, ok := strings.CutPrefix(part, "udp:"); ok {
			addr = v
		}
	}
	addr = strings.TrimPrefix(addr, "tcp:")
	udp, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("xray daemon address %q: %w", addr, err)
	}
	em, err := xray.NewDefaultEmitter(udp)
	if err != nil {
		return nil, err
	}
	return &Sink{emitter: em, service: service}, nil
}

var configureOnce sync.Once

// InstrumentAWS makes the AWS SDK clients built from cfg record their calls
// (DynamoDB writes, capability invocations) as X-Ray subsegments of the
// function's segment. Outside a traced context the SDK stays silent.
func InstrumentAWS(cfg *aws.Config) {
	configureOnce.Do(func() {
		_ = xray.Configure(xray.Config{ContextMissingStrategy: ctxmissing.NewDefaultIgnoreErrorStrategy()})
	})
	awsv2.AWSV2Instrumentor(&cfg.APIOptions)
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Record implements trace.Sink: it emits the execution at once (UDP to a
// local daemon does not block).
func (s *Sink) Record(_ context.Context, ex trace.Execution, calls []trace.Call) {
	h := header.FromString(ex.TraceHeader)
	if h.SamplingDecision == header.NotSampled {
		return
	}
	root := &xray.Segment{
		ID:        xray.NewSegmentID(),
		TraceID:   h.TraceID,
		Name:      s.service,
		StartTime: seconds(ex.StartedAt),
		EndTime:   seconds(ex.StartedAt) + ex.DurationMS/1000,
		Annotations: map[string]interface{}{
			"execution_id": ex.ID, "ok": ex.Status == "ok", "error_code": string(ex.ErrorCode), "source": ex.Source,
		},
		Metadata: map[string]map[string]interface{}{"pml": {
			"code_bytes": ex.CodeBytes, "code_hash": ex.CodeHash, "calls": ex.Calls, "duration_ms": ex.DurationMS,
			"parent_execution_id": ex.ParentExecutionID, "parent_call_id": ex.ParentCallID, "capability": ex.Capability,
			"cpu_ms": ex.CPUMS, "limit": ex.Limit,
		}},
		Error: ex.Status != "ok",
	}
	switch {
	case h.TraceID != "" && h.ParentID != "":
		// Inside a traced invocation (Lambda, or a caller that passed a
		// header): a subsegment of the caller's segment.
		root.Name = "execution"
		root.Type = "subsegment"
		root.ParentID = h.ParentID
	case h.TraceID == "":
		root.TraceID = xray.NewTraceID()
	}
	if ex.Capability != "" {
		root.Name = "capability " + ex.Capability
	}
	for _, c := range calls {
		if c.ExecutionID != ex.ID {
			continue // a child execution's call: its own execution records it
		}
		start := seconds(c.StartedAt)
		sub := &xray.Segment{
			ID:        xray.NewSegmentID(),
			Name:      c.Server + ":" + c.Tool,
			StartTime: start,
			EndTime:   start + c.DurationMS/1000,
			Namespace: "remote",
			Error:     !c.OK,
			Annotations: map[string]interface{}{
				"server": c.Server, "tool": c.Tool, "ok": c.OK, "error_code": string(c.ErrorCode), "kind": string(c.Kind),
			},
			Metadata: map[string]map[string]interface{}{"pml": {
				"call_id": c.CallID, "args_bytes": c.ArgsBytes, "result_bytes": c.ResultBytes, "duration_ms": c.DurationMS,
				"child_execution_id": c.ChildExecutionID,
			}},
		}
		if b, err := json.Marshal(sub); err == nil {
			root.Subsegments = append(root.Subsegments, b)
		}
	}
	root.ParentSegment = root
	root.Sampled = true
	s.emitter.Emit(root)
}

// Flush implements trace.Sink; documents are sent as they are recorded.
func (s *Sink) Flush(context.Context) error { return nil }

// Multi fans records out to several sinks.
type Multi []trace.Sink

// Record implements trace.Sink.
func (m Multi) Record(ctx context.Context, ex trace.Execution, calls []trace.Call) {
	for _, s := range m {
		s.Record(ctx, ex, calls)
	}
}

// RecordCall implements trace.CallRecorder for the sinks that do.
func (m Multi) RecordCall(ctx context.Context, c trace.Call) {
	for _, s := range m {
		if r, ok := s.(trace.CallRecorder); ok {
			r.RecordCall(ctx, c)
		}
	}
}

// StartExecution implements trace.Spans for the sinks that do.
func (m Multi) StartExecution(ctx context.Context, ex trace.Execution) context.Context {
	for _, s := range m {
		if sp, ok := s.(trace.Spans); ok {
			ctx = sp.StartExecution(ctx, ex)
		}
	}
	return ctx
}

// StartCall implements trace.Spans for the sinks that do.
func (m Multi) StartCall(ctx context.Context, c trace.Call) context.Context {
	for _, s := range m {
		if sp, ok := s.(trace.Spans); ok {
			ctx = sp.StartCall(ctx, c)
		}
	}
	return ctx
}

// Flush implements trace.Sink: every sink is flushed; the first error wins.
func (m Multi) Flush(ctx context.Context) error {
	var first error
	for _, s := range m {
		if err := s.Flush(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
