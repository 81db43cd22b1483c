// Package xraysink sends execution traces to AWS X-Ray: one (sub)segment per
// execution with a subsegment per tool call, annotated with server, tool, ok
// and error_code so traces can be filtered in the console. It sits behind
// trace.Sink, like every other trace destination.
//
// It speaks the X-Ray daemon's UDP protocol itself (a header line, then one
// segment document per datagram; docs/TRACES.md), without aws-xray-sdk-go:
// that SDK reaches end of support on 2027-02-25, and linking it brought
// aws-sdk-go v1 with it, whose endpoint tables alone cost every cold start
// ~2 ms of package initialisation for the three calls this package makes
// of it. The protocol is small and stable: the daemon accepts the same
// documents from every SDK.
//
// Records arrive after the execution, with their real start times and
// durations, so the documents are built from them rather than timed live.
package xraysink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/trace"
)

// Sink emits X-Ray documents.
type Sink struct {
	emitter *emitter
	service string
}

// New sends to the daemon at AWS_XRAY_DAEMON_ADDRESS (default
// 127.0.0.1:2000). An execution that ran under a trace header with a parent
// (as in Lambda) becomes a subsegment of that segment; otherwise it is a
// segment of its own named service.
func New(service string) (*Sink, error) {
	em, err := newEmitter()
	if err != nil {
		return nil, err
	}
	return &Sink{emitter: em, service: service}, nil
}

// daemonAddr resolves AWS_XRAY_DAEMON_ADDRESS, which may list
// "tcp:host:port udp:host:port": UDP is what segments travel over.
func daemonAddr() (*net.UDPAddr, error) {
	addr := os.Getenv("AWS_XRAY_DAEMON_ADDRESS")
	if addr == "" {
		addr = "127.0.0.1:2000"
	}
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
	return udp, nil
}

// emitter writes documents to the daemon, one datagram each. The socket is
// dialled on first use and again after a failed write.
type emitter struct {
	addr *net.UDPAddr
	mu   sync.Mutex
	conn *net.UDPConn
}

func newEmitter() (*emitter, error) {
	addr, err := daemonAddr()
	if err != nil {
		return nil, err
	}
	return &emitter{addr: addr}, nil
}

// daemonHeader precedes every document (the daemon's protocol).
const daemonHeader = "{\"format\": \"json\", \"version\": 1}\n"

// maxDatagram keeps a datagram within what UDP carries (64 KiB less the
// headers); a larger segment is sent as its subsegments' own documents.
const maxDatagram = 60 << 10

// emit sends d, splitting its subsegments off into documents of their own
// when the whole would not fit one datagram. Failures are dropped, as the
// SDK dropped them: tracing never fails an execution.
func (em *emitter) emit(d *document) {
	b, err := json.Marshal(d)
	if err != nil {
		return
	}
	if len(b) > maxDatagram && len(d.Subsegments) > 0 {
		subs := d.Subsegments
		d.Subsegments = nil
		for _, s := range subs {
			s.TraceID, s.ParentID, s.Type = d.TraceID, d.ID, "subsegment"
			em.emit(s)
		}
		em.emit(d)
		return
	}
	em.send(append([]byte(daemonHeader), b...))
}

func (em *emitter) send(p []byte) {
	em.mu.Lock()
	defer em.mu.Unlock()
	if em.conn == nil {
		c, err := net.DialUDP("udp", nil, em.addr)
		if err != nil {
			return
		}
		em.conn = c
	}
	if _, err := em.conn.Write(p); err != nil {
		_ = em.conn.Close()
		em.conn = nil
	}
}

// document is an X-Ray segment or subsegment document (the fields this
// package sets; the daemon's schema has more).
type document struct {
	ID          string                    `json:"id"`
	TraceID     string                    `json:"trace_id,omitempty"`
	ParentID    string                    `json:"parent_id,omitempty"`
	Type        string                    `json:"type,omitempty"`
	Name        string                    `json:"name"`
	StartTime   float64                   `json:"start_time"`
	EndTime     float64                   `json:"end_time"`
	Namespace   string                    `json:"namespace,omitempty"`
	Error       bool                      `json:"error,omitempty"`
	Fault       bool                      `json:"fault,omitempty"`
	Throttle    bool                      `json:"throttle,omitempty"`
	HTTP        *httpInfo                 `json:"http,omitempty"`
	AWS         map[string]any            `json:"aws,omitempty"`
	Annotations map[string]any            `json:"annotations,omitempty"`
	Metadata    map[string]map[string]any `json:"metadata,omitempty"`
	Subsegments []*document               `json:"subsegments,omitempty"`
}

type httpInfo struct {
	Response struct {
		Status int `json:"status"`
	} `json:"response"`
}

// header is the X-Ray trace header, "Root=…;Parent=…;Sampled=…".
type header struct {
	traceID, parentID string
	notSampled        bool
}

func parseHeader(s string) header {
	var h header
	for _, part := range strings.Split(s, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch strings.ToLower(k) {
		case "root":
			h.traceID = v
		case "parent":
			h.parentID = v
		case "sampled":
			h.notSampled = v == "0"
		}
	}
	return h
}

// newSegmentID is 64 random bits in hex.
func newSegmentID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newTraceID is "1-", the time in seconds as 8 hex digits, "-" and 96
// random bits in hex.
func newTraceID(now time.Time) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("1-%08x-%s", now.Unix(), hex.EncodeToString(b[:]))
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Record implements trace.Sink: it emits the execution at once (UDP to a
// local daemon does not block).
func (s *Sink) Record(_ context.Context, ex trace.Execution, calls []trace.Call) {
	h := parseHeader(ex.TraceHeader)
	if h.notSampled {
		return
	}
	root := &document{
		ID:        newSegmentID(),
		TraceID:   h.traceID,
		Name:      s.service,
		StartTime: seconds(ex.StartedAt),
		EndTime:   seconds(ex.StartedAt) + ex.DurationMS/1000,
		Annotations: map[string]any{
			"execution_id": ex.ID, "ok": ex.Status == "ok", "error_code": string(ex.ErrorCode), "source": ex.Source,
		},
		Metadata: map[string]map[string]any{"pml": {
			"code_bytes": ex.CodeBytes, "code_hash": ex.CodeHash, "calls": ex.Calls, "duration_ms": ex.DurationMS,
			"parent_execution_id": ex.ParentExecutionID, "parent_call_id": ex.ParentCallID, "capability": ex.Capability,
			"cpu_ms": ex.CPUMS, "limit": ex.Limit,
		}},
		Error: ex.Status != "ok",
	}
	switch {
	case h.traceID != "" && h.parentID != "":
		// Inside a traced invocation (Lambda, or a caller that passed a
		// header): a subsegment of the caller's segment.
		root.Name = "execution"
		root.Type = "subsegment"
		root.ParentID = h.parentID
	case h.traceID == "":
		root.TraceID = newTraceID(ex.StartedAt)
	}
	if ex.Capability != "" {
		root.Name = "capability " + ex.Capability
	}
	for _, c := range calls {
		if c.ExecutionID != ex.ID {
			continue // a child execution's call: its own execution records it
		}
		start := seconds(c.StartedAt)
		root.Subsegments = append(root.Subsegments, &document{
			ID:        newSegmentID(),
			Name:      c.Server + ":" + c.Tool,
			StartTime: start,
			EndTime:   start + c.DurationMS/1000,
			Namespace: "remote",
			Error:     !c.OK,
			Annotations: map[string]any{
				"server": c.Server, "tool": c.Tool, "ok": c.OK, "error_code": string(c.ErrorCode), "kind": string(c.Kind),
			},
			Metadata: map[string]map[string]any{"pml": {
				"call_id": c.CallID, "args_bytes": c.ArgsBytes, "result_bytes": c.ResultBytes, "duration_ms": c.DurationMS,
				"child_execution_id": c.ChildExecutionID,
			}},
		})
	}
	s.emitter.emit(root)
}

// Flush implements trace.Sink; documents are sent as they are recorded.
func (s *Sink) Flush(context.Context) error { return nil }
