package tracedb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// warning is one slog record of the JSON handler.
type warning struct {
	Level, Msg, File string
	Line             int
}

func warnings(t *testing.T, logs *bytes.Buffer) []warning {
	t.Helper()
	var out []warning
	for line := range strings.Lines(logs.String()) {
		var w warning
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// appendLines writes raw lines to the file, as a broken or older writer
// might have.
func appendLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if _, err := f.WriteString(l + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFileStoreSkipsBadLines: one bad line in the file store (too long to
// hold, or not a record) is skipped with a warning naming the file and the
// line; every good execution around it stays readable. A 227 MB line once
// made `pml trace` fail for every execution.
func TestFileStoreSkipsBadLines(t *testing.T) {
	garbage := strings.Repeat("x", 10<<20)
	tests := []struct {
		name    string
		maxLine int // 0: the default bound
		bad     []string
	}{
		{"10 MB garbage line", 0, []string{garbage}},
		{"line past the bound", 1 << 20, []string{garbage}},
		{"line past the bound naming the execution", 1 << 20, []string{`{"execution":{"execution_id":"ex_b"` + garbage}},
		{"malformed JSON", 0, []string{`{"execution":{"execution_id":"ex_b","calls":[`}},
		{"not a record", 0, []string{`[1,2,3]`, `"execution_id":"ex_b"`, ``}},
		{"all at once", 1 << 20, []string{garbage, `{"execution":{"execution_id":"ex_b",`, garbage + `"execution_id":"ex_b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.maxLine > 0 {
				defer tracedb.SetMaxLineBytes(tt.maxLine)()
			}
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "traces.jsonl")
			w := tracedb.NewFile(path, 0)
			record := func(id string) {
				ex, calls := execution(id, 3, "a:x", "b:y")
				w.Record(ctx, ex, calls)
				if err := w.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			record("ex_a")
			appendLines(t, path, tt.bad...)
			record("ex_b")

			// A fresh store reads only the file, as another pml command would.
			var logs bytes.Buffer
			r := tracedb.NewFile(path, 0).WithLogger(slog.New(slog.NewJSONHandler(&logs, nil)))
			for _, id := range []string{"ex_a", "ex_b"} {
				ex, calls, err := r.GetExecution(ctx, id)
				if err != nil || ex.ID != id || len(calls) != 3 {
					t.Fatalf("%s: %+v, %d calls, %v", id, ex, len(calls), err)
				}
			}
			if _, _, err := r.GetExecution(ctx, "ex_missing"); fault.CodeOf(err) != fault.NotFound {
				t.Fatalf("missing execution: %v", err)
			}
			rel, err := r.RelatedTools(ctx, "a:x", 10)
			if err != nil || len(rel) != 1 || rel[0].Tool != "b:y" || rel[0].Count != 2 {
				t.Fatalf("related %+v %v", rel, err)
			}
			ws := warnings(t, &logs)
			if len(ws) == 0 {
				t.Fatal("no warning for the bad lines")
			}
			for _, w := range ws {
				if w.Level != "WARN" || w.File != path || w.Line < 2 || w.Line > 1+len(tt.bad) {
					t.Errorf("warning %+v; want WARN naming %s and a line in 2..%d", w, path, 1+len(tt.bad))
				}
			}
		})
	}
}

// TestFileStoreBoundsOneExecution: an execution with more calls than a
// record may hold keeps its first calls (its count says how many there
// were), and its line in the file stays within the bound the reader holds.
func TestFileStoreBoundsOneExecution(t *testing.T) {
	tests := []struct {
		name    string
		maxLine int // 0: the default bound
		calls   int
		// Calls read back from memory and from the file; -1: some, not all.
		wantMemory, wantFile int
	}{
		{"past the call cap", 0, tracedb.MaxStoredCalls + 5000, tracedb.MaxStoredCalls, tracedb.MaxStoredCalls},
		{"under the call cap", 0, 100, 100, 100},
		{"past the line bound", 64 << 10, 2000, 2000, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maxLine := tracedb.MaxLineBytes()
			if tt.maxLine > 0 {
				defer tracedb.SetMaxLineBytes(tt.maxLine)()
				maxLine = tt.maxLine
			}
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "traces.jsonl")
			w := tracedb.NewFile(path, 0)
			ex, calls := execution("ex_big", tt.calls, "a:x", "b:y")
			w.Record(ctx, ex, calls)
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > maxLine+1 {
				t.Fatalf("one line of %d bytes; the bound is %d", len(data), maxLine)
			}
			for _, s := range []struct {
				name  string
				store tracedb.Store
				want  int
			}{{"memory", w, tt.wantMemory}, {"file", tracedb.NewFile(path, 0), tt.wantFile}} {
				got, gotCalls, err := s.store.GetExecution(ctx, "ex_big")
				if err != nil || got.Calls != tt.calls {
					t.Fatalf("%s: %+v %v", s.name, got, err)
				}
				n := len(gotCalls)
				if s.want >= 0 && n != s.want || s.want < 0 && (n == 0 || n >= tt.calls) {
					t.Fatalf("%s: read back %d of %d calls; want %d", s.name, n, tt.calls, s.want)
				}
				for i, c := range gotCalls {
					if c.CallID != i+1 {
						t.Fatalf("%s: call %d has id %d; want the first calls kept", s.name, i, c.CallID)
					}
				}
			}
		})
	}
}
