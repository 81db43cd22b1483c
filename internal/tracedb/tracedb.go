// Package tracedb stores execution traces where they can be read back: an
// embedded store (memory, optionally appended to a JSON-lines file so
// separate pml commands share it) and DynamoDB. Both implement trace.Sink
// for writing and Reader for GetExecution and RelatedTools.
package tracedb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/userdata"
)

// Related is a tool seen in the same executions as another, with how often.
type Related struct {
	Tool  string `json:"tool"`
	Count int64  `json:"count"`
}

// Reader reads traces back.
type Reader interface {
	// GetExecution returns the execution and its calls in call order; an
	// unknown id is a NOT_FOUND fault.
	GetExecution(ctx context.Context, id string) (trace.Execution, []trace.Call, error)
	// RelatedTools lists the tools used together with tool ("server:tool"),
	// most frequent first.
	RelatedTools(ctx context.Context, tool string, limit int) ([]Related, error)
}

// Store writes and reads traces.
type Store interface {
	trace.Sink
	Reader
}

// record is one execution with its calls, as stored by the embedded store
// (one line of the file).
type record struct {
	Execution trace.Execution `json:"execution"`
	Calls     []trace.Call    `json:"calls"`
	// OmittedCalls counts the calls past the first ones kept (see
	// MaxStoredCalls); Execution.Calls still counts them all.
	OmittedCalls int `json:"omitted_calls,omitempty"`
	// Pattern is the execution's trace.Pattern, for the learning loop
	// (internal/learn folds the file's patterns into candidates).
	Pattern *trace.Pattern `json:"pattern,omitempty"`
}

// MaxStoredCalls bounds the calls the embedded store keeps per execution:
// the first ones (by call id) are kept and the rest only counted. It is
// above the engine's highest call limit (10,000) and the one record that
// sums up refused calls past it, so it only trims a runaway execution: a
// loop of refused calls once wrote one line of 227 MB.
const MaxStoredCalls = 16384

// maxLineBytes bounds one line of the file: Flush never writes a longer
// one (it keeps fewer calls instead) and readers skip a longer one without
// holding it. 16,384 calls take about 6 MB. A variable for tests.
var maxLineBytes = 32 << 20

// newRecord keeps the first MaxStoredCalls calls of ex, in call order.
func newRecord(ex trace.Execution, calls []trace.Call) *record {
	byID := func(a, b trace.Call) int { return a.CallID - b.CallID }
	if !slices.IsSortedFunc(calls, byID) {
		// Calls usually arrive in call order; copy only when they do not.
		calls = slices.Clone(calls)
		slices.SortStableFunc(calls, byID)
	}
	r := &record{Execution: ex, Calls: calls, Pattern: ex.Pattern}
	if len(calls) > MaxStoredCalls {
		r.Calls, r.OmittedCalls = slices.Clip(calls[:MaxStoredCalls]), len(calls)-MaxStoredCalls
	}
	return r
}

// encodeLine is r as one line of the file, newline included, at most
// maxLineBytes long: when r is longer (calls with very long names), it
// keeps the share of its first calls that fits. It fails only when the
// execution alone does not fit.
func encodeLine(r *record) ([]byte, error) {
	for {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if len(b) < maxLineBytes {
			return append(b, '\n'), nil
		}
		if len(r.Calls) == 0 {
			return nil, fmt.Errorf("execution %s: a record of %d bytes without calls is past the %d-byte line bound", r.Execution.ID, len(b), maxLineBytes)
		}
		// Calls are most of the line; keep the share that fits, at least
		// one fewer each round, so this ends.
		keep := min(len(r.Calls)-1, int(int64(len(r.Calls))*int64(maxLineBytes)/int64(len(b))))
		r = &record{Execution: r.Execution, Calls: r.Calls[:keep], OmittedCalls: r.OmittedCalls + len(r.Calls) - keep, Pattern: r.Pattern}
	}
}

// MaxCountedTools bounds the distinct tools of one execution that count
// for co-occurrence: the first ones it called (by call id). Counting is
// quadratic in them — 32 tools make 992 counters — and the execution item
// carries them (docs/TRACES.md), so neither may grow with what a script
// does.
const MaxCountedTools = 32

// countedTools returns the distinct tools of calls that count for
// co-occurrence: the first MaxCountedTools in call order, sorted. A
// durable execution recorded again after a resume keeps its earlier
// calls' ids, so its counted tools only ever grow.
func countedTools(calls []trace.Call) []string {
	byID := func(a, b trace.Call) int { return a.CallID - b.CallID }
	if !slices.IsSortedFunc(calls, byID) {
		// Calls usually arrive in call order; copy only when they do not.
		calls = slices.Clone(calls)
		slices.SortStableFunc(calls, byID)
	}
	var tools []string
	for _, c := range calls {
		if c.Server == "" {
			continue // built-ins (tools.search...) are not tools
		}
		n := c.Server + ":" + c.Tool
		if !slices.Contains(tools, n) {
			tools = append(tools, n)
			if len(tools) == MaxCountedTools {
				break
			}
		}
	}
	slices.Sort(tools)
	return tools
}

// newPairs is what an execution whose counted tools went from old to now
// adds to the co-occurrence counters: one for each ordered pair of
// distinct tools in now that old did not already have. Each execution
// counts each pair once, however often it is recorded.
func newPairs(old, now []string) [][2]string {
	var out [][2]string
	for _, a := range now {
		for _, b := range now {
			if a != b && !(slices.Contains(old, a) && slices.Contains(old, b)) {
				out = append(out, [2]string{a, b})
			}
		}
	}
	return out
}

func notFound(id string) error {
	return fault.New(fault.NotFound, "no execution %q in the trace store", id)
}

// Memory is the embedded store. With a file, every flushed record is also
// appended to it, and reads fall back to the file for executions this
// process did not see.
type Memory struct {
	path string
	log  *slog.Logger // nil: slog.Default()

	mu      sync.Mutex
	records map[string]*record
	order   []string // oldest first, for eviction
	pending []*record
	related map[string]map[string]int64
	max     int
	calls   int // call records held, over all executions
}

// maxHeldCalls bounds the call records a Memory holds, whatever the number
// of executions: at ~250 bytes each, about 25 MB. Without it, 10,000
// executions that each made the engine's maximum of calls would hold
// gigabytes.
const maxHeldCalls = 100_000

// NewMemory keeps the last max executions (default 10,000) in memory, and
// fewer when together they hold more than 100,000 call records.
func NewMemory(max int) *Memory {
	if max <= 0 {
		max = 10000
	}
	return &Memory{records: map[string]*record{}, related: map[string]map[string]int64{}, max: max}
}

// NewFile is NewMemory persisted to a JSON-lines file at path.
func NewFile(path string, max int) *Memory {
	m := NewMemory(max)
	m.path = path
	return m
}

// WithLogger sets the logger that is warned about lines of the file a read
// skips (default slog.Default()) and returns m. Call it before using m.
func (m *Memory) WithLogger(log *slog.Logger) *Memory {
	m.log = log
	return m
}

func (m *Memory) logger() *slog.Logger {
	if m.log != nil {
		return m.log
	}
	return slog.Default()
}

// DefaultFilePath is $PML_TRACES_FILE, else $XDG_DATA_HOME/pml/traces.jsonl.
func DefaultFilePath() string { return userdata.Path("PML_TRACES_FILE", "traces.jsonl") }

// Record implements trace.Sink.
func (m *Memory) Record(_ context.Context, ex trace.Execution, calls []trace.Call) {
	r := newRecord(ex, calls)
	m.mu.Lock()
	defer m.mu.Unlock()
	var counted []string // what an earlier record of this execution counted
	if old, seen := m.records[ex.ID]; seen {
		m.calls -= len(old.Calls)
		counted = countedTools(old.Calls)
	} else {
		m.order = append(m.order, ex.ID)
	}
	m.records[ex.ID] = r
	m.calls += len(r.Calls)
	for len(m.order) > 1 && (len(m.order) > m.max || m.calls > maxHeldCalls) {
		if old := m.records[m.order[0]]; old != nil {
			m.calls -= len(old.Calls)
		}
		delete(m.records, m.order[0])
		m.order = m.order[1:]
	}
	for _, p := range newPairs(counted, countedTools(calls)) {
		if m.related[p[0]] == nil {
			m.related[p[0]] = map[string]int64{}
		}
		m.related[p[0]][p[1]]++
	}
	if m.path != "" {
		m.pending = append(m.pending, r)
	}
}

// Flush implements trace.Sink: appends pending records to the file.
func (m *Memory) Flush(context.Context) error {
	m.mu.Lock()
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()
	if m.path == "" || len(pending) == 0 {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(m.path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(m.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, r := range pending {
		line, err := encodeLine(r)
		if err != nil {
			// Never write a line readers would skip; the other records
			// are still worth keeping.
			m.logger().Warn("trace record not written to the file", "file", m.path, "execution_id", r.Execution.ID, "error", err.Error())
			continue
		}
		if _, err := w.Write(line); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// GetExecution implements Reader.
func (m *Memory) GetExecution(_ context.Context, id string) (trace.Execution, []trace.Call, error) {
	m.mu.Lock()
	r, ok := m.records[id]
	m.mu.Unlock()
	if !ok && m.path != "" {
		var err error
		if r, err = m.scanFile(id); err != nil {
			return trace.Execution{}, nil, err
		}
		ok = r != nil
	}
	if !ok {
		return trace.Execution{}, nil, notFound(id)
	}
	calls := slices.Clone(r.Calls)
	slices.SortStableFunc(calls, func(a, b trace.Call) int { return a.CallID - b.CallID })
	return r.Execution, calls, nil
}

// scanFile finds the newest record of id in the file.
func (m *Memory) scanFile(id string) (*record, error) {
	var found *record
	needle := []byte(`"execution_id":"` + id + `"`)
	err := m.eachLine(func(n int, line []byte) {
		// Only lines that name id are worth decoding.
		if !bytes.Contains(line, needle) {
			return
		}
		if r, ok := m.decodeLine(n, line); ok && r.Execution.ID == id {
			found = r
		}
	})
	return found, err
}

// decodeLine decodes line n of the file, or warns that it is skipped.
func (m *Memory) decodeLine(n int, line []byte) (*record, bool) {
	var r record
	err := json.Unmarshal(line, &r)
	if err == nil && r.Execution.ID == "" {
		err = errors.New("not an execution record")
	}
	if err != nil {
		m.skipLine(n, err.Error())
		return nil, false
	}
	r.Execution.Pattern = r.Pattern
	return &r, true
}

// Learned calls fn with every execution record that carries a pattern or
// is a capability's run, without its calls: what the learning loop
// (internal/learn.Local) counts. With a file it reads the file (only the
// lines that hold either are decoded); without, the executions this
// process holds. Such records are written once each (a durable
// execution's later records carry no pattern), so each counts once.
func (m *Memory) Learned(_ context.Context, fn func(trace.Execution)) error {
	if m.path == "" {
		m.mu.Lock()
		var out []trace.Execution
		for _, id := range m.order {
			if r := m.records[id]; r != nil && (r.Pattern != nil || r.Execution.Capability != "") {
				out = append(out, r.Execution)
			}
		}
		m.mu.Unlock()
		for _, ex := range out {
			fn(ex)
		}
		return nil
	}
	pattern, capability := []byte(`"pattern":`), []byte(`"capability":`)
	return m.eachLine(func(n int, line []byte) {
		if !bytes.Contains(line, pattern) && !bytes.Contains(line, capability) {
			return
		}
		if r, ok := m.decodeLine(n, line); ok && (r.Pattern != nil || r.Execution.Capability != "") {
			fn(r.Execution)
		}
	})
}

func (m *Memory) skipLine(n int, reason string) {
	m.logger().Warn("trace file line skipped", "file", m.path, "line", n, "reason", reason)
}

// eachLine calls fn with every non-empty line of the file (without its
// newline) and its number from 1; line is only valid during the call. A
// line longer than maxLineBytes is read through in pieces, never held
// whole, and skipped with a warning: one bad line must not make the whole
// file unreadable, as bufio.Scanner's "token too long" did. A missing file
// has no lines.
func (m *Memory) eachLine(fn func(n int, line []byte)) error {
	f, err := os.Open(m.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var line []byte
	for n := 1; ; n++ {
		line = line[:0]
		tooLong := false
		var err error
		for {
			var piece []byte
			piece, err = br.ReadSlice('\n')
			if !tooLong && len(line)+len(piece) > maxLineBytes+1 { // +1: the newline
				tooLong, line = true, line[:0]
			}
			if !tooLong {
				line = append(line, piece...)
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		switch line = bytes.TrimSuffix(line, []byte("\n")); {
		case tooLong:
			m.skipLine(n, fmt.Sprintf("longer than %d bytes", maxLineBytes))
		case len(line) > 0:
			fn(n, line)
		}
		if err != nil { // io.EOF
			return nil
		}
	}
}

// RelatedTools implements Reader (over what this process recorded, plus
// the file when there is one).
func (m *Memory) RelatedTools(_ context.Context, tool string, limit int) ([]Related, error) {
	counts := map[string]int64{}
	m.mu.Lock()
	for t, n := range m.related[tool] {
		counts[t] = n
	}
	m.mu.Unlock()
	if m.path != "" && len(counts) == 0 {
		if err := m.scanRelated(tool, counts); err != nil {
			return nil, err
		}
	}
	return topRelated(counts, limit), nil
}

// scanRelated counts from the file: each execution once, as its last line
// (a durable execution is recorded again after each resume) has it.
func (m *Memory) scanRelated(tool string, counts map[string]int64) error {
	last := map[string][]string{}
	err := m.eachLine(func(n int, line []byte) {
		if r, ok := m.decodeLine(n, line); ok {
			last[r.Execution.ID] = countedTools(r.Calls)
		}
	})
	for _, tools := range last {
		if slices.Contains(tools, tool) {
			for _, t := range tools {
				if t != tool {
					counts[t]++
				}
			}
		}
	}
	return err
}

func topRelated(counts map[string]int64, limit int) []Related {
	out := make([]Related, 0, len(counts))
	for t, n := range counts {
		out = append(out, Related{Tool: t, Count: n})
	}
	slices.SortFunc(out, func(a, b Related) int {
		if a.Count != b.Count {
			return int(b.Count - a.Count)
		}
		return strings.Compare(a.Tool, b.Tool)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}
