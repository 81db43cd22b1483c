// Package xraylisten is a stand-in for the AWS X-Ray daemon in tests: a UDP
// listener on loopback that parses what the X-Ray SDK sends to
// AWS_XRAY_DAEMON_ADDRESS, so tests can assert on real segments.
package xraylisten

import (
	"bytes"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"
)

// Segment is the part of an X-Ray segment or subsegment document tests look
// at. Raw keeps the whole document.
type Segment struct {
	ID          string                    `json:"id"`
	TraceID     string                    `json:"trace_id"`
	ParentID    string                    `json:"parent_id"`
	Name        string                    `json:"name"`
	Type        string                    `json:"type"`
	StartTime   float64                   `json:"start_time"`
	EndTime     float64                   `json:"end_time"`
	InProgress  bool                      `json:"in_progress"`
	Error       bool                      `json:"error"`
	Fault       bool                      `json:"fault"`
	Annotations map[string]any            `json:"annotations"`
	Metadata    map[string]map[string]any `json:"metadata"`
	Subsegments []Segment                 `json:"subsegments"`
	Raw         json.RawMessage           `json:"-"`
}

// Listener collects segments.
type Listener struct {
	conn *net.UDPConn
	mu   sync.Mutex
	segs []Segment
	done chan struct{}
}

// Start listens on a free loopback UDP port until the test ends.
func Start(tb testing.TB) *Listener {
	tb.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	l := &Listener{conn: conn, done: make(chan struct{})}
	go l.read()
	tb.Cleanup(func() {
		_ = conn.Close()
		<-l.done
	})
	return l
}

// Addr is the value for AWS_XRAY_DAEMON_ADDRESS.
func (l *Listener) Addr() string { return l.conn.LocalAddr().String() }

func (l *Listener) read() {
	defer close(l.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := l.conn.Read(buf)
		if err != nil {
			return
		}
		// Each datagram is a header line, then one segment document.
		_, body, ok := bytes.Cut(buf[:n], []byte("\n"))
		if !ok {
			continue
		}
		var s Segment
		if json.Unmarshal(body, &s) != nil {
			continue
		}
		s.Raw = append(json.RawMessage(nil), body...)
		l.mu.Lock()
		l.segs = append(l.segs, s)
		l.mu.Unlock()
	}
}

// Segments returns every document received so far, flattening embedded
// subsegments into the list too.
func (l *Listener) Segments() []Segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Segment
	var walk func(s Segment)
	walk = func(s Segment) {
		out = append(out, s)
		for _, c := range s.Subsegments {
			if c.TraceID == "" {
				c.TraceID = s.TraceID
			}
			walk(c)
		}
	}
	for _, s := range l.segs {
		walk(s)
	}
	return out
}

// Wait polls until match accepts the received segments or the timeout
// passes; it returns the segments either way.
func (l *Listener) Wait(timeout time.Duration, match func([]Segment) bool) ([]Segment, bool) {
	deadline := time.Now().Add(timeout)
	for {
		segs := l.Segments()
		if match(segs) {
			return segs, true
		}
		if time.Now().After(deadline) {
			return segs, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
