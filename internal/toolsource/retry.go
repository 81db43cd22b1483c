package toolsource

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Retry is the one retry policy of every source: after a failed load, an
// immediate attempt, then waits from Initial doubling to Max with ±20 %
// jitter, at most Attempts attempts in all; then the server stays
// unavailable until a Tools or Call asks for it again (a frozen Lambda has
// no use for a timer, and a server that is down for good is not hammered
// by the process). Jitter keeps many warm containers that lost one server
// from all coming back at the same instant.
//
// cenkalti/backoff is the schedule because it is context-aware and
// jittered; what it leaves out (on-demand rounds, never two at once, a
// permanent error that stops the round) is the Set's.
type Retry struct {
	Initial, Max time.Duration
	Attempts     int
}

// DefaultRetry is 1 s doubling to 30 s, 8 attempts: a server back within
// about two minutes is found without anyone asking.
var DefaultRetry = Retry{Initial: time.Second, Max: 30 * time.Second, Attempts: 8}

// OrDefault is r with DefaultRetry's value for each field left unset:
// the policy in force, for a kind that paces work of its own by it (an
// MCP server's subscription stream, reopened as a reconnect would be).
func (r Retry) OrDefault() Retry {
	if r.Initial <= 0 {
		r.Initial = DefaultRetry.Initial
	}
	if r.Max < r.Initial {
		r.Max = max(DefaultRetry.Max, r.Initial)
	}
	if r.Attempts <= 0 {
		r.Attempts = DefaultRetry.Attempts
	}
	return r
}

// run calls attempt by the policy until it succeeds, fails permanently,
// the attempts are spent or ctx ends; notify hears each failure that is
// followed by a wait. It returns the last error.
func (r Retry) run(ctx context.Context, attempt func() error, notify func(err error, next time.Duration)) error {
	r = r.OrDefault()
	b := &backoff.ExponentialBackOff{InitialInterval: r.Initial, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: r.Max}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := attempt()
		if err != nil && IsPermanent(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxTries(uint(r.Attempts)), backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(notify))
	return err
}

// permanent marks an error retrying will not mend.
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// Permanent marks a load error that retrying will not mend (a document
// refused, a login needed): the Set stops its retries until demand, a
// call's UNAVAILABLE is not retryable and says err alone, and an eager
// kind's New fails with it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanent{err}
}

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanent
	return errors.As(err, &p)
}
