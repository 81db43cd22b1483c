package suspend

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// What waits is listed by who asked: an index beside the records, written
// when a record is saved suspended and removed when it is finished, holds
// per owner (the record's principal) one hint per waiting record, keyed by
// its expiry and id, and the list of owners. A page of the list reads the
// hints of one owner in order and loads only the records of that page;
// no listing reads every record, and one owner's many records never hide
// another's. Hints are only hints: each is checked against its record,
// and a stale one (its record finished, expired, or saved again under a
// new key) is removed when a listing meets it.

// waitHint is one hint: owner's record id waits, until the expiry its key
// begins with.
type waitHint struct {
	Owner, Key, ID string
}

// ownerHint is an owner the index holds: Cursor is where a listing of
// owners goes on after it, Expires when its latest hint expires (zero:
// unknown).
type ownerHint struct {
	Owner, Cursor string
	Expires       time.Time
}

// waitKey is the index key of a record waiting until expires: ordered by
// expiry, then id.
func waitKey(expires time.Time, id string) string {
	return fmt.Sprintf("%020d#%s", expires.UnixNano(), id)
}

// hintOf returns the hint key names for owner, false when key is not one
// waitKey made.
func hintOf(owner, key string) (waitHint, bool) {
	_, id, ok := strings.Cut(key, "#")
	if !ok || !validID(id) {
		return waitHint{}, false
	}
	return waitHint{Owner: owner, Key: key, ID: id}, true
}

// hintExpiry is when the record of key stopped waiting at the latest.
func hintExpiry(key string) (time.Time, bool) {
	var ns int64
	if _, err := fmt.Sscanf(key, "%020d#", &ns); err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// maxListPage bounds a page of either listing.
const maxListPage = 200

// scanFactor bounds the hints one page may read to scanFactor times its
// size (plus scanSlack): stale hints are removed as they are met, so the
// next page reads fewer.
const (
	scanFactor = 4
	scanSlack  = 16
)

// Owners implements Store.
func (c *core) Owners(ctx context.Context, after string, limit int) ([]string, string, error) {
	if limit <= 0 || limit > maxListPage {
		limit = maxListPage
	}
	now := c.now()
	var out []string
	cursors := []string{}
	cursor := after
	for budget := scanFactor*limit + scanSlack; budget > 0; {
		hs, more, err := c.b.owners(ctx, cursor, min(limit+1-len(out), budget))
		if err != nil {
			return nil, "", fmt.Errorf("suspend: listing who waits: %w", err)
		}
		for _, h := range hs {
			budget--
			cursor = h.Cursor
			if !h.Expires.IsZero() && !now.Before(h.Expires) {
				continue
			}
			out, cursors = append(out, h.Owner), append(cursors, h.Cursor)
		}
		if len(out) > limit {
			return out[:limit], cursors[limit-1], nil
		}
		if !more {
			return out, "", nil
		}
	}
	return out, cursor, nil
}

// ListOf implements Store. It reads the records of the page alone (and
// those of stale hints, which it removes): whether more follow is told
// by the next hint, unread.
func (c *core) ListOf(ctx context.Context, owner, after string, limit int) ([]*Record, string, error) {
	if limit <= 0 || limit > maxListPage {
		limit = maxListPage
	}
	now := c.now()
	var out []*Record
	cursor := after
	for budget := scanFactor*limit + scanSlack; budget > 0; {
		hs, more, err := c.b.waitingOf(ctx, owner, cursor, min(limit+1-len(out), budget))
		if err != nil {
			return nil, "", fmt.Errorf("suspend: listing what waits: %w", err)
		}
		for _, h := range hs {
			if len(out) == limit {
				return out, cursor, nil // h is one more
			}
			budget--
			cursor = h.Key
			m, err := c.b.get(ctx, h.ID)
			if err != nil {
				return nil, "", fmt.Errorf("suspend: reading %s: %w", h.ID, err)
			}
			switch {
			case m == nil || m.WaitKey != h.Key || m.Principal != owner || m.State == Done || m.State == Failed ||
				m.State == Suspended && m.expired(now):
				// It waits for nothing, or waits under a newer hint. A
				// record being resumed may suspend again (and write a
				// new hint, removing this one), so its hint stays.
				_ = c.b.unmarkWaiting(ctx, h)
			case m.State == Suspended:
				out = append(out, m.record())
			}
		}
		if !more {
			return out, "", nil
		}
	}
	return out, cursor, nil
}

// hintFor is m's hint, if it was saved with one.
func hintFor(m *meta) (waitHint, bool) {
	if m.WaitKey == "" {
		return waitHint{}, false
	}
	return hintOf(m.Principal, m.WaitKey)
}
