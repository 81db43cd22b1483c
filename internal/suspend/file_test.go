package suspend_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/suspend"
)

func fileLocation(t *testing.T) location {
	dir := filepath.Join(t.TempDir(), "suspended")
	return location{
		open: func(opts suspend.Options) suspend.Store { return suspend.NewFile(dir, opts) },
		items: func(t *testing.T, id string) []storedItem {
			t.Helper()
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var out []storedItem
			for _, e := range entries {
				info, err := e.Info()
				if err != nil {
					t.Fatal(err)
				}
				switch name := e.Name(); {
				case name == id+".json":
					out = append(out, storedItem{"meta", int(info.Size())})
				case strings.HasPrefix(name, id+"."):
					out = append(out, storedItem{name, int(info.Size())})
				}
			}
			return out
		},
		spoil: func(t *testing.T, id string) {
			if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// TestFileLayout checks the image is stored as binary, in its own file,
// and private to the user.
func TestFileLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "suspended")
	s := suspend.NewFile(dir, suspend.Options{})
	saved(t, s, "alice")
	mem := suspension(1<<20, 1).Memory
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		info, _ := e.Info()
		if e.Name() == ".quota" {
			if !e.IsDir() || info.Mode().Perm() != 0o700 {
				t.Errorf(".quota (the principals' ledgers) has mode %v", info.Mode())
			}
			continue
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v: readable by others", e.Name(), perm)
		}
		if e.IsDir() { // waiting/, the index of what waits
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case e.Name() == "ex_1.json":
			if len(data) > 4<<10 {
				t.Errorf("metadata is %d bytes: the image leaked into it?", len(data))
			}
		case strings.HasSuffix(e.Name(), ".body"):
			// Raw bytes, not base64: the image appears as is, and the file
			// is barely bigger than it.
			if !bytes.Contains(data, mem) || len(data) > len(mem)+8<<10 {
				t.Errorf("body of %d bytes for a %d-byte image does not hold it raw", len(data), len(mem))
			}
		}
	}
	if len(names) != 5 { // .lock, .quota, ex_1.json, ex_1.<key>.body, waiting
		t.Fatalf("files %v", names)
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v %v", info.Mode(), err)
	}
	// A corrupt body is refused, never resumed.
	for _, n := range names {
		if strings.HasSuffix(n, ".body") {
			p := filepath.Join(dir, n)
			data, _ := os.ReadFile(p)
			data[len(data)-1] ^= 1
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.Claim(context.Background(), "ex_1", 1, "alice"); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("claim of a corrupt image: %v", err)
	}
	if r, err := s.Load(context.Background(), "ex_1"); err == nil {
		t.Fatalf("load of a corrupt image: %+v", r)
	}
}

// TestFileSweepsExpiredRecords checks the file store deletes what DynamoDB's
// TTL would: records an hour past their expiry, with their images, and
// images nothing points at once they are an hour old, but nothing younger.
func TestFileSweepsExpiredRecords(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "suspended")
	clk := newClock()
	s := suspend.NewFile(dir, suspend.Options{Now: clk.Now})
	if err := s.Save(ctx, &suspend.Record{ID: "ex_old", Suspension: suspension(1000, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, &suspend.Record{ID: "ex_old.2", Suspension: suspension(1000, 1)}); err != nil {
		t.Fatal(err)
	}
	clk.Add(suspend.DefaultTTL)
	if err := s.Save(ctx, &suspend.Record{ID: "ex_recent", Suspension: suspension(1000, 2)}); err != nil {
		t.Fatal(err)
	}
	hoursAgo := time.Now().Add(-2 * time.Hour)
	for name, old := range map[string]bool{
		"ex_gone.0000000001-0123456789abcdef.body": true,  // orphan, left by a crash
		"ex_busy.0000000001-0123456789abcdef.body": false, // a write in progress
		".tmp-123": true,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if old {
			if err := os.Chtimes(p, hoursAgo, hoursAgo); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.Add(time.Hour + time.Second) // ex_old* are now over an hour past expiry
	if err := s.Save(ctx, &suspend.Record{ID: "ex_new", Suspension: suspension(1000, 3)}); err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	joined := strings.Join(names, " ")
	for _, id := range []string{"ex_recent", "ex_new"} {
		if _, err := s.Load(ctx, id); err != nil {
			t.Errorf("%s: %v (files: %s)", id, err, joined)
		}
	}
	// The index of what waits lists the two records left.
	hints, _ := filepath.Glob(filepath.Join(dir, "waiting", "*", "*#*"))
	if len(hints) != 2 || strings.Contains(strings.Join(hints, " "), "ex_old") {
		t.Errorf("hints after the sweep: %v", hints)
	}
	// What is left: the lock, the ledgers, two records and their bodies,
	// the young write, the index.
	if len(names) != 8 || strings.Contains(joined, "ex_old") || strings.Contains(joined, "ex_gone") || strings.Contains(joined, ".tmp-") || !strings.Contains(joined, "ex_busy") {
		t.Fatalf("files after the sweep: %s", joined)
	}
}

// TestFileMissingImage checks a record whose image is lost says so, at
// once, rather than passing for a record that keeps changing.
func TestFileMissingImage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "suspended")
	s := suspend.NewFile(dir, suspend.Options{})
	saved(t, s, "")
	bodies, _ := filepath.Glob(filepath.Join(dir, "ex_1.*.body"))
	if len(bodies) != 1 {
		t.Fatalf("bodies %v", bodies)
	}
	if err := os.Remove(bodies[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(context.Background(), "ex_1"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("load: %v", err)
	}
	if _, err := s.Claim(context.Background(), "ex_1", 1, ""); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("claim: %v", err)
	}
}

// TestFileSweepKeepsCheckpoints: the hourly sweep of orphaned bodies keeps
// a live run's checkpoint, however old its file: it is what a takeover
// continues from.
func TestFileSweepKeepsCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "runs")
	clk := newClock()
	runs := suspend.NewFileRuns(dir, suspend.Options{Now: clk.Now})
	first := claimRun(t, runs, "ex_long", 2*time.Hour) // a long lease: still held at the sweep
	if err := runs.Checkpoint(ctx, "ex_long", first.Runner, []byte("state")); err != nil {
		t.Fatal(err)
	}
	hoursAgo := time.Now().Add(-2 * time.Hour)
	bodies, _ := filepath.Glob(filepath.Join(dir, "*.body"))
	if len(bodies) < 2 {
		t.Fatalf("bodies: %v", bodies)
	}
	for _, b := range bodies {
		if err := os.Chtimes(b, hoursAgo, hoursAgo); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(time.Hour + time.Second)
	claimRun(t, runs, "ex_next", 30*time.Second) // the sweep runs as this run is recorded
	clk.Add(time.Hour)                           // the first runner's lease lapses
	r, err := runs.Takeover(ctx, "ex_long", mustLoad(t, runs, "ex_long").Version, time.Minute)
	if err != nil {
		t.Fatalf("taken over after the sweep: %v", err)
	}
	if string(r.Checkpoint) != "state" {
		t.Fatalf("checkpoint after the sweep: %q", r.Checkpoint)
	}
}

func mustLoad(t *testing.T, runs suspend.Runs, id string) *suspend.Run {
	t.Helper()
	r, err := runs.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
