package suspend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
	"github.com/pml-sandbox/pml/internal/trace"
)

var engine *guest.Engine

func TestMain(m *testing.M) {
	enginetest.Main(m, func(e *guest.Engine) { engine = e }, dynamolocal.StopAll)
}

// tools is the tool table of the test suspensions and the engine test.
var tools = []guest.Tool{
	{Server: "demo", Name: "echo", Description: "Returns its arguments.", InputSchema: json.RawMessage(`{"type":"object"}`)},
	{Server: "demo", Name: "add", Description: "Adds {a, b}.", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}`)},
}

// clock is a settable Options.Now shared by the stores of one test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// newClock starts at the real time: DynamoDB Local honours the table's TTL,
// and deletes in the background items whose ttl a fixed date in the past
// had already expired (the chunks vanished between two reads).
func newClock() *clock { return &clock{t: time.Now().UTC().Truncate(time.Second)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// location is one storage (a directory, a table) that several Store values
// may share, as several processes would.
type location struct {
	open func(opts suspend.Options) suspend.Store
	// items lists what is stored for id, for the store-specific checks.
	items func(t *testing.T, id string) []storedItem
	// spoil makes id's record unreadable.
	spoil func(t *testing.T, id string)
}

// storedItem is one file or one DynamoDB item, with its size.
type storedItem struct {
	name string
	size int
}

// kinds are the stores every conformance test runs against.
var kinds = []struct {
	name string
	new  func(t *testing.T) location
}{
	{"file", fileLocation},
	{"dynamodb", dynamoLocation},
}

// forEachStore runs f once per kind of store, with a clock and a store at
// a fresh location; f may open more stores there with loc.open.
func forEachStore(t *testing.T, f func(t *testing.T, s suspend.Store, clk *clock, loc location)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			loc := k.new(t)
			clk := newClock()
			f(t, loc.open(suspend.Options{Now: clk.Now}), clk, loc)
		})
	}
}

// suspension fabricates a suspension whose memory is n random bytes
// (incompressible, like a real image of random data).
func suspension(n int, seed uint64) *guest.Suspension {
	mem := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(mem)
	started := time.Date(2026, 3, 1, 11, 59, 0, 0, time.UTC)
	return &guest.Suspension{
		GuestHash: "0123456789abcdef",
		Pages:     uint32(n/65536 + 40),
		Memory:    mem,
		Parked:    []guest.ParkedCall{{CallID: 2, Server: "demo", Tool: "add", Args: json.RawMessage(`{"a":41,"b":1}`), GuestID: 7}},
		Tools:     tools,
		NextID:    9,
		Calls: []trace.Call{
			{ExecutionID: "ex_1", CallID: 1, Server: "demo", Tool: "echo", Kind: trace.KindMCP, StartedAt: started, DurationMS: 0.5, OK: true, ArgsBytes: 7},
			{ExecutionID: "ex_1", CallID: 2, Server: "demo", Tool: "add", Kind: trace.KindMCP, StartedAt: started, Status: trace.StatusParked, ArgsBytes: 14},
		},
		Logs:     []trace.LogEntry{{Level: "log", Message: "waiting for approval", AtMS: 1.5}},
		LogBytes: 84,
		Delivered: map[int32]*fault.Error{
			3: fault.New(fault.ToolError, "boom"),
		},
		Used:     2 * time.Second,
		Limits:   guest.Limits{Timeout: 30 * time.Second, MemoryBytes: 64 << 20},
		Suspends: 1,
	}
}

// sameSuspension compares two suspensions by their JSON (which includes
// the memory), so every field counts.
func sameSuspension(t *testing.T, got, want *guest.Suspension) {
	t.Helper()
	if got == nil {
		t.Fatal("no suspension")
	}
	if !bytes.Equal(got.Memory, want.Memory) {
		t.Fatalf("memory: %d bytes, want %d (or contents differ)", len(got.Memory), len(want.Memory))
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("suspension differs:\n got %.600s\nwant %.600s", g, w)
	}
}

const bridgeData = `{"narrowing":[["demo:*"]],"allow_destructive":false,"source":"http"}`

// saved creates a record ex_1 (version 1) with a 1 MiB memory image.
func saved(t *testing.T, s suspend.Store, principal string) *suspend.Record {
	t.Helper()
	r := &suspend.Record{ID: "ex_1", Principal: principal, Bridge: json.RawMessage(bridgeData), Suspension: suspension(1<<20, 1)}
	if err := s.Save(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSaveAndLoad(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, _ location) {
		ctx := context.Background()
		start := clk.Now()
		r := saved(t, s, "arn:aws:iam::123456789012:user/alice")
		if r.Version != 1 || r.State != suspend.Suspended || !r.CreatedAt.Equal(start) || !r.ExpiresAt.Equal(start.Add(suspend.DefaultTTL)) {
			t.Fatalf("saved record: %+v", r)
		}
		// 30 s limit, 2 s used: 28 s left, plus the margin.
		if want := 28*time.Second + suspend.LeaseMargin; r.Lease != want {
			t.Fatalf("lease %v, want %v", r.Lease, want)
		}
		got, err := s.Load(ctx, "ex_1")
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != "ex_1" || got.Version != 1 || got.State != suspend.Suspended || got.Principal != r.Principal ||
			string(got.Bridge) != bridgeData || !got.CreatedAt.Equal(start) || !got.UpdatedAt.Equal(start) ||
			!got.ExpiresAt.Equal(r.ExpiresAt) || !got.ClaimedAt.IsZero() || got.Lease != r.Lease || got.FailureCode != "" {
			t.Fatalf("loaded record: %+v", got)
		}
		sameSuspension(t, got.Suspension, r.Suspension)

		// A second creation of the same id is refused, and changes nothing.
		again := &suspend.Record{ID: "ex_1", Suspension: suspension(10, 2)}
		if err := s.Save(ctx, again); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("second creation: %v, want ErrConflict", err)
		}
		got, err = s.Load(ctx, "ex_1")
		if err != nil || got.Version != 1 {
			t.Fatalf("after refused creation: %+v %v", got, err)
		}
		sameSuspension(t, got.Suspension, r.Suspension)
	})
}

func TestSaveRefusesInvalidRecords(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, _ *clock, _ location) {
		for _, tc := range []struct {
			name string
			r    suspend.Record
		}{
			{"empty id", suspend.Record{Suspension: suspension(10, 1)}},
			{"path in id", suspend.Record{ID: "../ex_1", Suspension: suspension(10, 1)}},
			{"hidden id", suspend.Record{ID: ".lock", Suspension: suspension(10, 1)}},
			{"no suspension", suspend.Record{ID: "ex_1"}},
			{"bridge not JSON", suspend.Record{ID: "ex_1", Bridge: json.RawMessage("{"), Suspension: suspension(10, 1)}},
			{"bridge too big", suspend.Record{ID: "ex_1", Bridge: json.RawMessage(`"` + string(bytes.Repeat([]byte("x"), suspend.MaxBridgeBytes)) + `"`), Suspension: suspension(10, 1)}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := s.Save(context.Background(), &tc.r); !errors.Is(err, suspend.ErrInvalid) {
					t.Fatalf("got %v, want ErrInvalid", err)
				}
			})
		}
		if _, err := s.Load(context.Background(), "ex_1"); !errors.Is(err, suspend.ErrNotFound) {
			t.Fatalf("a refused record was stored: %v", err)
		}
	})
}

func TestConcurrentClaimsOneWins(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, loc location) {
		r := saved(t, s, "alice")
		const n = 8
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			records = make([]*suspend.Record, n)
			errs    = make([]error, n)
		)
		for i := range n {
			// Each claimant has a store of its own over the same storage,
			// as separate processes would.
			other := loc.open(suspend.Options{Now: clk.Now})
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				records[i], errs[i] = other.Claim(context.Background(), "ex_1", 1, "alice")
			}()
		}
		close(start)
		wg.Wait()
		var won *suspend.Record
		for i, err := range errs {
			switch {
			case err == nil:
				if won != nil {
					t.Fatalf("two claims won")
				}
				won = records[i]
			case !errors.Is(err, suspend.ErrConflict):
				t.Fatalf("claim %d: %v, want ErrConflict", i, err)
			}
		}
		if won == nil {
			t.Fatal("no claim won")
		}
		if won.Version != 2 || won.State != suspend.Resuming || !won.ClaimedAt.Equal(clk.Now()) {
			t.Fatalf("winning claim: %+v", won)
		}
		sameSuspension(t, won.Suspension, r.Suspension)
		// A late claim is told what it lost to.
		_, err := s.Claim(context.Background(), "ex_1", 1, "alice")
		var se *suspend.StateError
		if !errors.As(err, &se) || se.State != suspend.Resuming || se.Version != 2 {
			t.Fatalf("late claim: %v, want a StateError resuming at version 2", err)
		}
	})
}

func TestClaimErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		before    func(t *testing.T, s suspend.Store, clk *clock)
		id        string
		version   int
		principal string
		want      error
	}{
		{name: "unknown id", id: "ex_2", version: 1, principal: "alice", want: suspend.ErrNotFound},
		{name: "malformed id", id: "../ex_1", version: 1, principal: "alice", want: suspend.ErrNotFound},
		{name: "another principal", id: "ex_1", version: 1, principal: "mallory", want: suspend.ErrForbidden},
		{name: "no principal", id: "ex_1", version: 1, principal: "", want: suspend.ErrForbidden},
		{name: "wrong version", id: "ex_1", version: 2, principal: "alice", want: suspend.ErrConflict},
		{name: "expired", id: "ex_1", version: 1, principal: "alice", want: suspend.ErrExpired,
			before: func(t *testing.T, s suspend.Store, clk *clock) { clk.Add(suspend.DefaultTTL) }},
		{name: "just before expiry", id: "ex_1", version: 1, principal: "alice", want: nil,
			before: func(t *testing.T, s suspend.Store, clk *clock) { clk.Add(suspend.DefaultTTL - time.Millisecond) }},
		{name: "finished", id: "ex_1", version: 1, principal: "alice", want: suspend.ErrConflict,
			before: func(t *testing.T, s suspend.Store, clk *clock) {
				c, err := s.Claim(context.Background(), "ex_1", 1, "alice")
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Finish(context.Background(), "ex_1", c.Version, suspend.Done, ""); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, _ location) {
				saved(t, s, "alice")
				if tc.before != nil {
					tc.before(t, s, clk)
				}
				r, err := s.Claim(context.Background(), tc.id, tc.version, tc.principal)
				if tc.want == nil {
					if err != nil || r.State != suspend.Resuming {
						t.Fatalf("claim: %+v %v", r, err)
					}
					return
				}
				if !errors.Is(err, tc.want) || r != nil {
					t.Fatalf("claim: %v (record %v), want %v", err, r, tc.want)
				}
			})
		})
	}
}

func TestExpiry(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, loc location) {
		ctx := context.Background()
		short := loc.open(suspend.Options{TTL: time.Minute, Now: clk.Now})
		r := &suspend.Record{ID: "ex_short", Suspension: suspension(1000, 3)}
		if err := short.Save(ctx, r); err != nil {
			t.Fatal(err)
		}
		if !r.ExpiresAt.Equal(clk.Now().Add(time.Minute)) {
			t.Fatalf("expires at %v", r.ExpiresAt)
		}
		clk.Add(59 * time.Second)
		if _, err := s.Load(ctx, "ex_short"); err != nil {
			t.Fatalf("before expiry: %v", err)
		}
		clk.Add(time.Second)
		// Expiry is the stored one: a store with another TTL agrees.
		if _, err := s.Load(ctx, "ex_short"); !errors.Is(err, suspend.ErrExpired) {
			t.Fatalf("at expiry: %v, want ErrExpired", err)
		}
	})
}

func TestClaimOutlivesExpiry(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, _ location) {
		ctx := context.Background()
		r := saved(t, s, "")
		clk.Add(suspend.DefaultTTL - time.Second)
		c, err := s.Claim(ctx, "ex_1", 1, "")
		if err != nil {
			t.Fatal(err)
		}
		if !c.ExpiresAt.Equal(clk.Now().Add(r.Lease)) {
			t.Fatalf("claim expires at %v, want now + lease", c.ExpiresAt)
		}
		clk.Add(r.Lease / 2) // past the wait's expiry, within the lease
		if got, err := s.Load(ctx, "ex_1"); err != nil || got.State != suspend.Resuming {
			t.Fatalf("during the claim: %+v %v", got, err)
		}
		if err := s.Finish(ctx, "ex_1", c.Version, suspend.Done, ""); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAbandonedClaimFails(t *testing.T) {
	for _, detect := range []string{"load", "claim"} {
		t.Run("found by "+detect, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, _ location) {
				ctx := context.Background()
				r := saved(t, s, "alice")
				c, err := s.Claim(ctx, "ex_1", 1, "alice")
				if err != nil {
					t.Fatal(err)
				}
				clk.Add(r.Lease)
				// At the lease's very end the claim still holds.
				if got, err := s.Load(ctx, "ex_1"); err != nil || got.State != suspend.Resuming || got.Suspension == nil {
					t.Fatalf("at the lease's end: %+v %v", got, err)
				}
				clk.Add(time.Millisecond)
				switch detect {
				case "load":
					got, err := s.Load(ctx, "ex_1")
					if err != nil || got.State != suspend.Failed || got.FailureCode != suspend.CodeAbandoned || got.Version != 3 || got.Suspension != nil {
						t.Fatalf("abandoned, loaded: %+v %v", got, err)
					}
				case "claim":
					// Whatever version it names, nobody gets the state again.
					for _, v := range []int{1, 2} {
						_, err := s.Claim(ctx, "ex_1", v, "alice")
						var se *suspend.StateError
						if !errors.As(err, &se) || !errors.Is(err, suspend.ErrConflict) || se.State != suspend.Failed || se.FailureCode != suspend.CodeAbandoned || se.Version != 3 {
							t.Fatalf("claiming abandoned at %d: %v", v, err)
						}
					}
				}
				// The resumer, back from the dead, cannot finish nor suspend.
				if err := s.Finish(ctx, "ex_1", c.Version, suspend.Done, ""); !errors.Is(err, suspend.ErrConflict) {
					t.Fatalf("late finish: %v", err)
				}
				if err := s.Save(ctx, c); !errors.Is(err, suspend.ErrConflict) {
					t.Fatalf("late save: %v", err)
				}
				if got, err := s.Load(ctx, "ex_1"); err != nil || got.State != suspend.Failed || got.Version != 3 {
					t.Fatalf("finally: %+v %v", got, err)
				}
			})
		})
	}
}

func TestResaveMovesVersion(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, _ location) {
		ctx := context.Background()
		saved(t, s, "alice")
		clk.Add(time.Hour)
		c, err := s.Claim(ctx, "ex_1", 1, "alice")
		if err != nil {
			t.Fatal(err)
		}
		// The resumed run suspends again, with another image.
		clk.Add(time.Second)
		next := suspension(700<<10, 4)
		next.Suspends, next.Used = 2, 20*time.Second
		c.Suspension = next
		if err := s.Save(ctx, c); err != nil {
			t.Fatal(err)
		}
		now := clk.Now()
		if c.Version != 3 || c.State != suspend.Suspended || !c.ClaimedAt.IsZero() || !c.UpdatedAt.Equal(now) ||
			!c.ExpiresAt.Equal(now.Add(suspend.DefaultTTL)) || c.Lease != 10*time.Second+suspend.LeaseMargin {
			t.Fatalf("re-saved: %+v", c)
		}
		got, err := s.Load(ctx, "ex_1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != 3 || got.State != suspend.Suspended || !got.CreatedAt.Equal(c.CreatedAt) || !got.ClaimedAt.IsZero() {
			t.Fatalf("loaded: %+v", got)
		}
		sameSuspension(t, got.Suspension, next)

		// Nothing else may write at the old versions.
		stale := *c
		stale.Version = 2
		if err := s.Save(ctx, &stale); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("save at a stale version: %v", err)
		}
		if err := s.Save(ctx, c); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("save without a claim: %v", err)
		}
		if _, err := s.Claim(ctx, "ex_1", 1, "alice"); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("claim at version 1: %v", err)
		}
		c2, err := s.Claim(ctx, "ex_1", 3, "alice")
		if err != nil || c2.Version != 4 {
			t.Fatalf("claim at version 3: %+v %v", c2, err)
		}
		sameSuspension(t, c2.Suspension, next)
		other := *c2
		other.Principal = "mallory"
		if err := s.Save(ctx, &other); !errors.Is(err, suspend.ErrForbidden) {
			t.Fatalf("save by another principal: %v", err)
		}
	})
}

func TestFinish(t *testing.T) {
	for _, tc := range []struct {
		state suspend.State
		code  fault.Code
		want  fault.Code
	}{
		{suspend.Done, "", ""},
		{suspend.Done, fault.Timeout, ""}, // a done run has no failure code
		{suspend.Failed, fault.SandboxError, fault.SandboxError},
	} {
		t.Run(string(tc.state)+"_"+string(tc.code), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s suspend.Store, _ *clock, _ location) {
				ctx := context.Background()
				saved(t, s, "alice")
				c, err := s.Claim(ctx, "ex_1", 1, "alice")
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Finish(ctx, "ex_1", c.Version, tc.state, tc.code); err != nil {
					t.Fatal(err)
				}
				got, err := s.Load(ctx, "ex_1")
				if err != nil || got.State != tc.state || got.FailureCode != tc.want || got.Version != 3 || got.Suspension != nil || string(got.Bridge) != bridgeData {
					t.Fatalf("finished: %+v %v", got, err)
				}
				if err := s.Finish(ctx, "ex_1", c.Version, tc.state, tc.code); !errors.Is(err, suspend.ErrConflict) {
					t.Fatalf("second finish: %v", err)
				}
			})
		})
	}
	forEachStore(t, func(t *testing.T, s suspend.Store, _ *clock, _ location) {
		ctx := context.Background()
		saved(t, s, "")
		if err := s.Finish(ctx, "ex_1", 1, suspend.Done, ""); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("finish without a claim: %v", err)
		}
		if err := s.Finish(ctx, "ex_1", 1, suspend.Resuming, ""); !errors.Is(err, suspend.ErrInvalid) {
			t.Fatalf("finish as resuming: %v", err)
		}
		if err := s.Finish(ctx, "ex_9", 1, suspend.Done, ""); !errors.Is(err, suspend.ErrNotFound) {
			t.Fatalf("finish unknown: %v", err)
		}
	})
}

// TestImageOnlyWhileNeeded checks what is stored at each step: one body
// while the execution is suspended or resuming (the previous one is
// removed when it suspends again, a refused write's at once), none once it
// is finished.
func TestImageOnlyWhileNeeded(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, _ *clock, loc location) {
		ctx := context.Background()
		bodies := func() int {
			n := 0
			for _, it := range loc.items(t, "ex_1") {
				if it.name != "meta" {
					n++
				}
			}
			return n
		}
		saved(t, s, "")
		perBody := bodies()
		if perBody == 0 {
			t.Fatal("no body stored")
		}
		// A creation that loses to the existing record takes its body back.
		if err := s.Save(ctx, &suspend.Record{ID: "ex_1", Suspension: suspension(1<<20, 9)}); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("second creation: %v", err)
		}
		if n := bodies(); n != perBody {
			t.Fatalf("%d body items after a refused creation, want %d", n, perBody)
		}
		c, err := s.Claim(ctx, "ex_1", 1, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(ctx, c); err != nil {
			t.Fatal(err)
		}
		if n := bodies(); n != perBody {
			t.Fatalf("%d body items after a re-save, want %d (the old ones removed)", n, perBody)
		}
		c, err = s.Claim(ctx, "ex_1", c.Version, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, "ex_1", c.Version, suspend.Done, ""); err != nil {
			t.Fatal(err)
		}
		if n := bodies(); n != 0 {
			t.Fatalf("%d body items after finishing", n)
		}
	})
}

// listOf is every page of owner's waiting records, read limit at a time,
// as id/principal, and how many pages it took.
func listOf(t *testing.T, s suspend.Store, owner string, limit int) ([]string, int) {
	t.Helper()
	var out []string
	pages := 0
	for after := ""; ; {
		recs, next, err := s.ListOf(context.Background(), owner, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(recs) > limit {
			t.Fatalf("a page of %d records, limit %d", len(recs), limit)
		}
		for _, r := range recs {
			if r.Suspension != nil || r.State != suspend.Suspended || r.Principal != owner {
				t.Fatalf("listed %+v for %q: want metadata of a suspended record of its owner", r, owner)
			}
			out = append(out, r.ID)
		}
		if next == "" {
			return out, pages
		}
		if pages > 100 {
			t.Fatal("the pages never end")
		}
		after = next
	}
}

// owners is every page of the store's owners, read limit at a time,
// sorted.
func owners(t *testing.T, s suspend.Store, limit int) []string {
	t.Helper()
	var out []string
	for after, pages := "", 0; ; pages++ {
		page, next, err := s.Owners(context.Background(), after, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > limit || pages > 100 {
			t.Fatalf("a page of %d owners, limit %d (page %d)", len(page), limit, pages)
		}
		out = append(out, page...)
		if next == "" {
			slices.Sort(out)
			return out
		}
		after = next
	}
}

// TestList: what waits is listed by who asked, each owner's soonest to
// expire first, a page at a time, and nothing else — not a finished
// execution, not one being resumed, not an expired one; one that suspends
// again is listed again, last; a second store over the same storage
// (another process) sees the same.
func TestList(t *testing.T) {
	forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, loc location) {
		ctx := context.Background()
		if got := owners(t, s, 10); len(got) != 0 {
			t.Fatalf("empty store lists %v", got)
		}
		var alice []string
		save := func(id, principal string) {
			t.Helper()
			r := &suspend.Record{ID: id, Principal: principal, Bridge: json.RawMessage(bridgeData), Suspension: suspension(1<<10, uint64(len(id)))}
			if err := s.Save(ctx, r); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Minute)
		}
		for i := range 7 {
			id := fmt.Sprintf("ex_a%d", i)
			save(id, "alice")
			alice = append(alice, id)
		}
		save("ex_b", "bob")
		save("ex_l", "") // pml serve's callers have no principal
		other := loc.open(suspend.Options{Now: clk.Now})
		for _, limit := range []int{1, 2, 10} {
			if got, want := fmt.Sprint(owners(t, other, limit)), "[ alice bob]"; got != want {
				t.Fatalf("owners by %d: %s, want %s", limit, got, want)
			}
		}
		for _, limit := range []int{1, 3, 7, 50} {
			got, pages := listOf(t, other, "alice", limit)
			if fmt.Sprint(got) != fmt.Sprint(alice) || pages != (len(alice)+limit-1)/limit {
				t.Fatalf("alice's by %d: %v in %d pages, want %v", limit, got, pages, alice)
			}
		}
		if got, _ := listOf(t, s, "", 10); fmt.Sprint(got) != "[ex_l]" {
			t.Fatalf("the local caller's: %v", got)
		}
		// ex_a0 is resumed and finished; ex_b is being resumed.
		c1, err := s.Claim(ctx, "ex_a0", 1, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, "ex_a0", c1.Version, suspend.Done, ""); err != nil {
			t.Fatal(err)
		}
		c2, err := s.Claim(ctx, "ex_b", 1, "bob")
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := listOf(t, s, "alice", 4); fmt.Sprint(got) != fmt.Sprint(alice[1:]) {
			t.Fatalf("after a finish, alice's: %v", got)
		}
		if got, _ := listOf(t, s, "bob", 4); len(got) != 0 {
			t.Fatalf("bob's, being resumed, listed: %v", got)
		}
		// ex_b suspends again: it waits anew.
		c2.Suspension = suspension(1<<10, 9)
		if err := s.Save(ctx, c2); err != nil {
			t.Fatal(err)
		}
		if got, _ := listOf(t, other, "bob", 4); fmt.Sprint(got) != "[ex_b]" {
			t.Fatalf("after ex_b suspended again, bob's: %v", got)
		}
		clk.Add(suspend.DefaultTTL)
		for _, o := range []string{"alice", "bob", ""} {
			if got, _ := listOf(t, s, o, 4); len(got) != 0 {
				t.Fatalf("a day later, %q's expired records are listed: %v", o, got)
			}
		}
	})
}

// TestListReadsOnlyItsPage: a page of one owner's list reads that owner's
// records alone, and only as many as the page shows: the other owner's
// records, unreadable, do not break it, and 55 of one owner do not hide
// the other's one.
func TestListReadsOnlyItsPage(t *testing.T) {
	forEachStore(t, func(t *testing.T, _ suspend.Store, clk *clock, loc location) {
		ctx := context.Background()
		// More than one principal may keep by default (50): the list is
		// what is under test, with a deployment that raised the quota.
		s := loc.open(suspend.Options{Now: clk.Now, Quota: suspend.Quota{Count: 100}})
		for i := range 55 {
			r := &suspend.Record{ID: fmt.Sprintf("ex_%02d", i), Principal: "agent", Suspension: suspension(256, uint64(i))}
			if err := s.Save(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		clk.Add(time.Minute)
		if err := s.Save(ctx, &suspend.Record{ID: "ex_bob", Principal: "bob", Suspension: suspension(256, 99)}); err != nil {
			t.Fatal(err)
		}
		recs, next, err := s.ListOf(ctx, "agent", "", 10)
		if err != nil || len(recs) != 10 || next == "" || recs[0].ID != "ex_00" {
			t.Fatalf("the agent's first page: %d records, next %q, %v", len(recs), next, err)
		}
		for i := 10; i < 55; i++ {
			loc.spoil(t, fmt.Sprintf("ex_%02d", i))
		}
		if got, _ := listOf(t, s, "bob", 10); fmt.Sprint(got) != "[ex_bob]" {
			t.Fatalf("bob's: %v", got)
		}
		if got := owners(t, s, 1); fmt.Sprint(got) != "[agent bob]" {
			t.Fatalf("owners: %v", got)
		}
		if recs, _, err := s.ListOf(ctx, "agent", "", 10); err != nil || len(recs) != 10 {
			t.Fatalf("the agent's first page again (its 45 others unreadable): %d, %v", len(recs), err)
		}
	})
}
