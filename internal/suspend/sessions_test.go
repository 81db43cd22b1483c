package suspend_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// sessionsPlace is one storage of sessions that several stores may share,
// and what it holds for an id.
type sessionsPlace struct {
	open  func(opts suspend.Options) suspend.Sessions
	items func(t *testing.T, id string) int
}

func forEachSessions(t *testing.T, f func(t *testing.T, p sessionsPlace, clk *clock)) {
	t.Run("file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "sessions")
		f(t, sessionsPlace{
			open: func(o suspend.Options) suspend.Sessions { return suspend.NewFileSessions(dir, o) },
			items: func(t *testing.T, id string) int {
				m, _ := filepath.Glob(filepath.Join(dir, id+".*"))
				return len(m)
			},
		}, newClock())
	})
	t.Run("dynamodb", func(t *testing.T) {
		db := dynamolocal.Start(t).Client()
		table := dynamolocal.TableName(t)
		if err := suspend.CreateTable(context.Background(), db, table); err != nil {
			t.Fatal(err)
		}
		f(t, sessionsPlace{
			open:  func(o suspend.Options) suspend.Sessions { return suspend.NewDynamoSessions(db, table, o) },
			items: func(t *testing.T, id string) int { return len(sessionItems(t, db, table, id)) },
		}, newClock())
	})
}

func sessionItems(t *testing.T, db *dynamodb.Client, table, id string) []map[string]types.AttributeValue {
	t.Helper()
	return itemsOf(t, db, table, "SESS#"+id)
}

func sandbox(n int, seed byte) *guest.State {
	m := bytes.Repeat([]byte{seed}, n)
	return &guest.State{GuestHash: "abc", Pages: 40, Memory: m}
}

// TestSessionLifecycle: created held by its first execution, saved,
// claimed with the state it saved, released by a failed execution with
// that state, deleted with everything it stored.
func TestSessionLifecycle(t *testing.T) {
	forEachSessions(t, func(t *testing.T, p sessionsPlace, clk *clock) {
		ctx := context.Background()
		st := p.open(suspend.Options{Now: clk.Now})
		s := &suspend.Session{ID: "ss_1", Principal: "jwt:i#s", Running: "ex_1", Lease: time.Minute, Idle: 2 * time.Hour, Bridge: []byte(`{"steps":0}`)}
		if err := st.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if s.Version != 1 || s.State != suspend.SessionRunning || s.Running != "ex_1" || s.Size != 0 {
			t.Fatalf("created %+v", s)
		}
		if err := st.Create(ctx, &suspend.Session{ID: "ss_1", Running: "ex_x"}); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("second create: %v", err)
		}
		s.Bridge = []byte(`{"steps":1}`)
		if err := st.Save(ctx, s, sandbox(1000, 7)); err != nil {
			t.Fatal(err)
		}
		if s.Version != 2 || s.State != suspend.SessionIdle || s.Running != "" || !s.ExpiresAt.Equal(clk.Now().Add(2*time.Hour)) {
			t.Fatalf("saved %+v", s)
		}
		got, err := st.Load(ctx, "ss_1", true)
		if err != nil {
			t.Fatal(err)
		}
		if got.Sandbox == nil || !bytes.Equal(got.Sandbox.Memory, sandbox(1000, 7).Memory) || got.Sandbox.GuestHash != "abc" || got.Sandbox.Pages != 40 || string(got.Bridge) != `{"steps":1}` || got.Size == 0 {
			t.Fatalf("loaded %+v", got)
		}

		c, err := st.Claim(ctx, "ss_1", 2, "jwt:i#s", "ex_2", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if c.Version != 3 || c.State != suspend.SessionRunning || c.Running != "ex_2" || !bytes.Equal(c.Sandbox.Memory, sandbox(1000, 7).Memory) {
			t.Fatalf("claimed %+v", c)
		}
		c.Bridge = []byte(`{"steps":2}`)
		clk.Add(90 * time.Minute) // longer than the old body's own expiry would allow to be sure it moved on
		if err := st.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
		got, err = st.Load(ctx, "ss_1", true)
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != 4 || got.State != suspend.SessionIdle || !bytes.Equal(got.Sandbox.Memory, sandbox(1000, 7).Memory) || string(got.Bridge) != `{"steps":2}` {
			t.Fatalf("after a release %+v", got)
		}
		if n := p.items(t, "ss_1"); n != 2 {
			t.Fatalf("%d items stored, want the record and its state", n)
		}

		if err := st.Delete(ctx, "ss_1", "someone else"); !errors.Is(err, suspend.ErrForbidden) {
			t.Fatalf("delete by another: %v", err)
		}
		if err := st.Delete(ctx, "ss_1", "jwt:i#s"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Load(ctx, "ss_1", false); !errors.Is(err, suspend.ErrNotFound) {
			t.Fatalf("load after delete: %v", err)
		}
		if n := p.items(t, "ss_1"); n != 0 {
			t.Fatalf("%d items left after delete", n)
		}
	})
}

// TestSessionOneAtATime: of executions claiming the same version at once,
// one wins and the others are told which execution holds it; a claim of
// an old version is a conflict; the holder's claim ends with its own
// execution only.
func TestSessionOneAtATime(t *testing.T) {
	forEachSessions(t, func(t *testing.T, p sessionsPlace, clk *clock) {
		ctx := context.Background()
		st := p.open(suspend.Options{Now: clk.Now})
		s := &suspend.Session{ID: "ss_2", Running: "ex_0", Lease: time.Minute}
		if err := st.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := st.Save(ctx, s, sandbox(10, 1)); err != nil {
			t.Fatal(err)
		}
		const n = 6
		var wg sync.WaitGroup
		errs := make([]error, n)
		claims := make([]*suspend.Session, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				other := p.open(suspend.Options{Now: clk.Now}) // as another process
				claims[i], errs[i] = other.Claim(ctx, "ss_2", s.Version, "", "ex_"+string(rune('a'+i)), time.Minute)
			}()
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				if won >= 0 {
					t.Fatalf("claims %d and %d both won", won, i)
				}
				won = i
			}
		}
		if won < 0 {
			t.Fatalf("no claim won: %v", errs)
		}
		for i, err := range errs {
			if i == won {
				continue
			}
			var busy *suspend.BusyError
			var se *suspend.StateError
			switch {
			case errors.As(err, &busy):
				if busy.Execution != claims[won].Running || !errors.Is(err, suspend.ErrConflict) {
					t.Fatalf("busy names %q, want %q", busy.Execution, claims[won].Running)
				}
			case errors.As(err, &se):
				// It read the version before the winner moved it.
			default:
				t.Fatalf("claim %d: %v", i, err)
			}
		}
		// A late claim of the old version, and an end by another execution,
		// are refused.
		if _, err := st.Claim(ctx, "ss_2", s.Version, "", "ex_late", time.Minute); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("late claim: %v", err)
		}
		stranger := *claims[won]
		stranger.Running = "ex_stranger"
		if err := st.Save(ctx, &stranger, sandbox(10, 9)); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("save by another execution: %v", err)
		}
		if err := st.Save(ctx, claims[won], sandbox(10, 2)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSessionExpiryAndLease: an idle session expires its idle time after
// its last execution (capped at a day); a claim past its lease is taken
// over from the last saved state, never a lost or forked one.
func TestSessionExpiryAndLease(t *testing.T) {
	forEachSessions(t, func(t *testing.T, p sessionsPlace, clk *clock) {
		ctx := context.Background()
		st := p.open(suspend.Options{Now: clk.Now})
		s := &suspend.Session{ID: "ss_3", Running: "ex_0", Lease: time.Minute, Idle: 100 * time.Hour}
		if err := st.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if s.Idle != suspend.MaxSessionIdle {
			t.Fatalf("idle %s, want it capped at %s", s.Idle, suspend.MaxSessionIdle)
		}
		if err := st.Save(ctx, s, sandbox(100, 3)); err != nil {
			t.Fatal(err)
		}
		c, err := st.Claim(ctx, "ss_3", s.Version, "", "ex_dies", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Claim(ctx, "ss_3", c.Version, "", "ex_next", time.Minute); !errors.As(err, new(*suspend.BusyError)) {
			t.Fatalf("claim within the lease: %v", err)
		}
		clk.Add(2 * time.Minute)
		c2, err := st.Claim(ctx, "ss_3", c.Version, "", "ex_next", time.Minute)
		if err != nil {
			t.Fatalf("claim past the lease: %v", err)
		}
		if !bytes.Equal(c2.Sandbox.Memory, sandbox(100, 3).Memory) {
			t.Fatal("the taken-over claim does not hold the last saved state")
		}
		if err := st.Save(ctx, c, sandbox(100, 4)); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("the dead runner saved after all: %v", err)
		}
		if err := st.Release(ctx, c2); err != nil {
			t.Fatal(err)
		}
		clk.Add(suspend.MaxSessionIdle + time.Second)
		if _, err := st.Load(ctx, "ss_3", false); !errors.Is(err, suspend.ErrExpired) {
			t.Fatalf("load after the idle time: %v", err)
		}
		if _, err := st.Claim(ctx, "ss_3", c2.Version+1, "", "ex_late", time.Minute); !errors.Is(err, suspend.ErrExpired) {
			t.Fatalf("claim after the idle time: %v", err)
		}
	})
}

// TestSessionsOwned: a session is its principal's: another's claim and
// delete are refused (the service answers them as for an unknown id).
func TestSessionsOwned(t *testing.T) {
	forEachSessions(t, func(t *testing.T, p sessionsPlace, clk *clock) {
		ctx := context.Background()
		st := p.open(suspend.Options{Now: clk.Now})
		s := &suspend.Session{ID: "ss_4", Principal: "arn:aws:iam::1:user/a", Running: "ex_0", Lease: time.Minute}
		if err := st.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := st.Release(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Claim(ctx, "ss_4", s.Version, "arn:aws:iam::1:user/b", "ex_1", time.Minute); !errors.Is(err, suspend.ErrForbidden) {
			t.Fatalf("another's claim: %v", err)
		}
		if err := st.Delete(ctx, "ss_4", ""); !errors.Is(err, suspend.ErrForbidden) {
			t.Fatalf("another's delete: %v", err)
		}
	})
}

// TestFileSessionsList: the directory store lists a principal's sessions,
// newest first, and keeps them private to the user.
func TestFileSessionsList(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	dir := filepath.Join(t.TempDir(), "sessions")
	st := suspend.NewFileSessions(dir, suspend.Options{Now: clk.Now})
	for i, who := range []string{"", "other", ""} {
		clk.Add(time.Second)
		s := &suspend.Session{ID: "ss_" + string(rune('a'+i)), Principal: who, Running: "ex", Lease: time.Minute}
		if err := st.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := st.Save(ctx, s, sandbox(10, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	list, err := st.(suspend.SessionLister).List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "ss_c" || list[1].ID != "ss_a" || list[0].Sandbox != nil {
		t.Fatalf("list = %+v", list)
	}
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v, %v", info.Mode(), err)
	}
	// Listing DynamoDB would need a scan or an index: not offered.
	if _, err := suspend.NewDynamoSessions(nil, "t", suspend.Options{}).(suspend.SessionLister).List(ctx, ""); err == nil {
		t.Fatal("the DynamoDB store listed sessions")
	}
}

// BenchmarkFileSessions measures what the directory store adds to a
// session's execution whose state is ~176 KB (a 4 MiB heap's): the claim
// (reading the record and the state, a synced write of the record) and
// the save (synced writes of the state and the record). It reports the
// p50 of each.
func BenchmarkFileSessions(b *testing.B) {
	ctx := context.Background()
	st := suspend.NewFileSessions(filepath.Join(b.TempDir(), "sessions"), suspend.Options{})
	s := &suspend.Session{ID: "ss_bench", Running: "ex_0", Lease: time.Minute}
	if err := st.Create(ctx, s); err != nil {
		b.Fatal(err)
	}
	state := sandbox(176<<10, 5)
	if err := st.Save(ctx, s, state); err != nil {
		b.Fatal(err)
	}
	var claims, saves []time.Duration
	for b.Loop() {
		t0 := time.Now()
		c, err := st.Claim(ctx, s.ID, s.Version, "", "ex_1", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := st.Save(ctx, c, state); err != nil {
			b.Fatal(err)
		}
		claims, saves = append(claims, t1.Sub(t0)), append(saves, time.Since(t1))
		s = c
	}
	b.ReportMetric(p50ms(claims), "claim-p50-ms")
	b.ReportMetric(p50ms(saves), "save-p50-ms")
}

func p50ms(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}
