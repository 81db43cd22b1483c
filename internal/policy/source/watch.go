package source

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/policy"
)

// DefaultEvery is how often a Watcher looks for a new version unless told.
const DefaultEvery = 60 * time.Second

// checkTimeout bounds one look at the source.
const checkTimeout = 10 * time.Second

// Watcher is a policy.Authorizer over the current version of a source's
// set. It looks for a new version when it is used and its last look is
// older than its period (a Lambda function is frozen between
// invocations, so a timer would not run), in the background: a request
// is decided by the set in force and never waits for the source.
type Watcher struct {
	f     Fetcher
	every time.Duration
	log   *slog.Logger
	now   func() time.Time

	cur atomic.Pointer[current]

	mu       sync.Mutex
	checking bool
	last     time.Time
	wg       sync.WaitGroup
}

type current struct {
	set     *policy.Set
	version string
}

// Watch loads f's set: an error when it cannot be read or does not
// validate (a service does not start without the policy the operator
// named). every ≤ 0 is DefaultEvery.
func Watch(ctx context.Context, f Fetcher, every time.Duration, log *slog.Logger) (*Watcher, error) {
	if every <= 0 {
		every = DefaultEvery
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{f: f, every: every, log: log, now: time.Now}
	if _, err := w.Refresh(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Set is the set in force.
func (w *Watcher) Set() *policy.Set { return w.cur.Load().set }

// Authorize implements policy.Authorizer with the set in force, and looks
// for a new version when it is due.
func (w *Watcher) Authorize(ctx context.Context, in policy.Input) (policy.Decision, error) {
	w.maybeCheck()
	return w.cur.Load().set.Authorize(ctx, in)
}

// ReadsArgs implements policy.ArgsReader.
func (w *Watcher) ReadsArgs() bool { return w.cur.Load().set.ReadsArgs() }

// Refresh looks at the source now: the new set when there is one and it
// loaded (it is then in force), nil when the version is unchanged; an
// error keeps the set in force.
func (w *Watcher) Refresh(ctx context.Context) (*policy.Set, error) {
	var since string
	if c := w.cur.Load(); c != nil {
		since = c.version
	}
	text, version, unchanged, err := w.f.Fetch(ctx, since)
	if err != nil || unchanged {
		return nil, err
	}
	s, err := policy.Parse(w.f.Name(), text)
	if err != nil {
		return nil, err
	}
	w.cur.Store(&current{set: s, version: version})
	return s, nil
}

// maybeCheck starts a look at the source when one is due and none runs.
func (w *Watcher) maybeCheck() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if w.checking || now.Sub(w.last) < w.every {
		return
	}
	w.checking, w.last = true, now
	w.wg.Go(func() {
		defer func() {
			w.mu.Lock()
			w.checking = false
			w.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		s, err := w.Refresh(ctx)
		switch {
		case err != nil:
			w.log.Warn("policy set not reloaded; the one in force stays", "source", w.f.Name(), "in_force", w.Set().Digest(), "err", err)
		case s != nil:
			w.log.Info("policy set reloaded", "source", w.f.Name(), "digest", s.Digest(), "policies", s.Len())
		}
	})
}

// Close waits for a look in progress to end.
func (w *Watcher) Close() { w.wg.Wait() }

// Snapshot implements policy.Snapshotter: the set in force, after looking
// for a new version when it is due (as Authorize does).
func (w *Watcher) Snapshot() *policy.Set {
	w.maybeCheck()
	return w.cur.Load().set
}
