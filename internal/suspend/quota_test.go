package suspend_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// limitOf is the quota a refusal names ("" when err is none).
func limitOf(err error) string {
	if fe := fault.As(err); err != nil && fe.Code == fault.LimitExceeded {
		return fe.Limit
	}
	return ""
}

// TestSessionsPerPrincipalByDefault: one principal holds at most
// DefaultSessionsPerPrincipal sessions at once, by default; another is
// not held back by it.
func TestSessionsPerPrincipalByDefault(t *testing.T) {
	forEachSessions(t, func(t *testing.T, p sessionsPlace, clk *clock) {
		ctx := context.Background()
		st := p.open(suspend.Options{Now: clk.Now})
		for i := range suspend.DefaultSessionsPerPrincipal {
			if err := st.Create(ctx, &suspend.Session{ID: fmt.Sprintf("ss_%d", i), Principal: "jwt:i#hog", Running: "ex", Lease: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		err := st.Create(ctx, &suspend.Session{ID: "ss_over", Principal: "jwt:i#hog", Running: "ex", Lease: time.Minute})
		if limitOf(err) != fault.LimitSessions {
			t.Fatalf("a session past the quota: %v", err)
		}
		if err := st.Create(ctx, &suspend.Session{ID: "ss_other", Principal: "jwt:i#other", Running: "ex", Lease: time.Minute}); err != nil {
			t.Fatalf("another principal's: %v", err)
		}
	})
}

// TestSuspendedPerPrincipalByDefault: the same for suspended executions.
func TestSuspendedPerPrincipalByDefault(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, loc location) {
		ctx := context.Background()
		for i := range suspend.DefaultSuspendedPerPrincipal {
			if err := s.Save(ctx, &suspend.Record{ID: fmt.Sprintf("ex_%d", i), Principal: "jwt:i#hog", Suspension: suspension(1000, uint64(i))}); err != nil {
				t.Fatal(err)
			}
		}
		err := s.Save(ctx, &suspend.Record{ID: "ex_over", Principal: "jwt:i#hog", Suspension: suspension(1000, 99)})
		if limitOf(err) != fault.LimitSuspended {
			t.Fatalf("a suspension past the quota: %v", err)
		}
		if _, err := s.Load(ctx, "ex_over"); err == nil {
			t.Fatal("the refused suspension was stored")
		}
	})
}

// TestSessionQuota: sessions count against their principal's quota in
// number and in bytes of saved state, as every store over the same
// storage sees them: of six sessions created at once from two stores
// under a quota of two, two are kept; a state that would pass the bytes is
// refused and not written (the claim is released with the state it had),
// a smaller one is kept; a session deleted, or expired, no longer counts.
func TestSessionQuota(t *testing.T) {
	forEachSessions(t, func(t *testing.T, p sessionsPlace, clk *clock) {
		ctx := context.Background()
		opts := suspend.Options{Now: clk.Now, Quota: suspend.Quota{Count: 2, Bytes: 3000}}
		a, b := p.open(opts), p.open(opts)
		const who = "jwt:i#hog"
		var wg sync.WaitGroup
		errs := make([]error, 6)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := a
				if i%2 == 1 {
					st = b
				}
				errs[i] = st.Create(ctx, &suspend.Session{ID: fmt.Sprintf("ss_%d", i), Principal: who, Running: "ex", Lease: time.Minute, Idle: time.Hour})
			}()
		}
		wg.Wait()
		var held []string
		for i, err := range errs {
			switch limitOf(err) {
			case "":
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, fmt.Sprintf("ss_%d", i))
			case fault.LimitSessions:
			default:
				t.Fatalf("refused as %v", err)
			}
		}
		if len(held) != 2 {
			t.Fatalf("%d sessions kept under a quota of 2", len(held))
		}
		s1, err := a.Load(ctx, held[0], false)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Save(ctx, s1, sandbox(2000, 1)); err != nil {
			t.Fatal(err)
		}
		s2, err := b.Load(ctx, held[1], false)
		if err != nil {
			t.Fatal(err)
		}
		s2.Running = "ex"
		err = b.Save(ctx, s2, sandbox(2000, 2))
		if limitOf(err) != fault.LimitSessionBytes {
			t.Fatalf("a state past the bytes: %v", err)
		}
		if got, _ := b.Load(ctx, held[1], true); got.Sandbox != nil || got.State != suspend.SessionRunning {
			t.Fatalf("the refused state was written: %+v", got)
		}
		if err := b.Release(ctx, s2); err != nil {
			t.Fatalf("releasing after the refusal: %v", err)
		}
		c2, err := b.Claim(ctx, held[1], s2.Version, who, "ex_2", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Save(ctx, c2, sandbox(500, 3)); err != nil {
			t.Fatalf("a state within the bytes: %v", err)
		}
		if err := a.Delete(ctx, held[0], who); err != nil {
			t.Fatal(err)
		}
		if err := a.Create(ctx, &suspend.Session{ID: "ss_after_delete", Principal: who, Running: "ex", Lease: time.Minute, Idle: time.Hour}); err != nil {
			t.Fatalf("after a delete: %v", err)
		}
		if err := a.Create(ctx, &suspend.Session{ID: "ss_full", Principal: who, Running: "ex", Lease: time.Minute, Idle: time.Hour}); limitOf(err) != fault.LimitSessions {
			t.Fatalf("full again: %v", err)
		}
		clk.Add(3 * time.Hour) // idle past their hour, and the grace
		if err := b.Create(ctx, &suspend.Session{ID: "ss_after_expiry", Principal: who, Running: "ex", Lease: time.Minute, Idle: time.Hour}); err != nil {
			t.Fatalf("after they expired: %v", err)
		}
	})
}

// TestSuspendedQuota: suspended executions count against their
// principal's quota in number and bytes; one finished no longer counts;
// a ledger entry whose record was never written (a crash between the
// two) holds nothing back.
func TestSuspendedQuota(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			loc := k.new(t)
			clk := newClock()
			s := loc.open(suspend.Options{Now: clk.Now, Quota: suspend.Quota{Count: 2, Bytes: 3 << 20}})
			const who = "jwt:i#hog"
			save := func(id string, n int) error {
				return s.Save(ctx, &suspend.Record{ID: id, Principal: who, Suspension: suspension(n, 7)})
			}
			if err := save("ex_a", 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := save("ex_big", 5<<20/2); limitOf(err) != fault.LimitSuspendedBytes {
				t.Fatalf("past the bytes: %v", err)
			}
			if _, err := s.Load(ctx, "ex_big"); !errors.Is(err, suspend.ErrNotFound) {
				t.Fatalf("the refused one was stored: %v", err)
			}
			if err := save("ex_b", 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := save("ex_c", 1000); limitOf(err) != fault.LimitSuspended {
				t.Fatalf("past the count: %v", err)
			}
			r, err := s.Claim(ctx, "ex_a", 1, who)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, "ex_a", r.Version, suspend.Done, ""); err != nil {
				t.Fatal(err)
			}
			if err := save("ex_c", 1000); err != nil {
				t.Fatalf("after one finished: %v", err)
			}
			if err := s.Save(ctx, &suspend.Record{ID: "ex_c", Principal: "jwt:i#other", Suspension: suspension(1000, 8)}); !errors.Is(err, suspend.ErrConflict) {
				t.Fatalf("another's save of the same id: %v", err)
			}
			// The other principal's ledger names ex_c, a write that never
			// happened (the id is another's): it holds nothing back.
			if err := s.Save(ctx, &suspend.Record{ID: "ex_d", Principal: "jwt:i#other", Suspension: suspension(1000, 9)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Save(ctx, &suspend.Record{ID: "ex_e", Principal: "jwt:i#other", Suspension: suspension(1000, 9)}); err != nil {
				t.Fatalf("an entry of a write that never happened held the quota: %v", err)
			}
		})
	}
}
