// Package tracedb stores execution traces where they can be read back: an
// embedded store (memory, optionally appended to a JSON-lines file so
// separate pml commands share it) and DynamoDB. Both implement trace.Sink
// for writing and Reader for GetExecution and RelatedTools.
package tracedb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
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

// record is one execution with its calls, as stored by the embedded store.
type record struct {
	Execution trace.Execution `json:"execution"`
	Calls     []trace.Call    `json:"calls"`
}

// pairs returns the distinct tools of calls, for co-occurrence counting.
func distinctTools(calls []trace.Call) []string {
	var tools []string
	for _, c := range calls {
		if c.Server == "" {
			continue // built-ins (tools.search...) are not tools
		}
		n := c.Server + ":" + c.Tool
		if !slices.Contains(tools, n) {
			tools = append(tools, n)
		}
	}
	slices.Sort(tools)
	return tools
}

func notFound(id string) error {
	return fault.New(fault.NotFound, "no execution %q in the trace store", id)
}

// Memory is the embedded store. With a file, every flushed record is also
// appended to it, and reads fall back to the file for executions this
// process did not see.
type Memory struct {
	path string

	mu      sync.Mutex
	records map[string]*record
	order   []string // oldest first, for eviction
	pending []*record
	related map[string]map[string]int64
	max     int
}

// NewMemory keeps the last max executions (default 10,000) in memory.
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

// DefaultFilePath is $PML_TRACES_FILE, else $XDG_DATA_HOME/pml/traces.jsonl.
func DefaultFilePath() string { return userdata.Path("PML_TRACES_FILE", "traces.jsonl") }

// Record implements trace.Sink.
func (m *Memory) Record(_ context.Context, ex trace.Execution, calls []trace.Call) {
	r := &record{Execution: ex, Calls: slices.Clone(calls)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := m.records[ex.ID]; !seen {
		m.order = append(m.order, ex.ID)
	}
	m.records[ex.ID] = r
	for len(m.order) > m.max {
		delete(m.records, m.order[0])
		m.order = m.order[1:]
	}
	tools := distinctTools(calls)
	for _, a := range tools {
		for _, b := range tools {
			if a != b {
				if m.related[a] == nil {
					m.related[a] = map[string]int64{}
				}
				m.related[a][b]++
			}
		}
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
	enc := json.NewEncoder(w)
	for _, r := range pending {
		if err := enc.Encode(r); err != nil {
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
	f, err := os.Open(m.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var found *record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	needle := `"execution_id":"` + id + `"`
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), needle) {
			continue
		}
		var r record
		if json.Unmarshal(line, &r) == nil && r.Execution.ID == id {
			found = &r
		}
	}
	return found, sc.Err()
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

func (m *Memory) scanRelated(tool string, counts map[string]int64) error {
	f, err := os.Open(m.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var r record
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		tools := distinctTools(r.Calls)
		if slices.Contains(tools, tool) {
			for _, t := range tools {
				if t != tool {
					counts[t]++
				}
			}
		}
	}
	return sc.Err()
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
