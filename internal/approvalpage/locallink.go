package approvalpage

import (
	"crypto/sha256"
	"sync"
	"time"
)

// LocalPrincipal is the principal of the person at the keyboard of a
// local server: whoever opens a one-time link that `pml serve` printed on
// its own terminal. It is no caller's principal (callers of pml serve
// have none, and deployed callers have IAM or JWT principals), and the
// local server's policy names it an approver.
const LocalPrincipal = "local:person"

// LinkTTL is how long a one-time sign-in link may be used.
const LinkTTL = 10 * time.Minute

// maxLinks bounds the links outstanding at once: the oldest goes first.
const maxLinks = 32

// LocalLinks are one-time sign-in links for the person at the keyboard:
// a random token in the URL, used once, within LinkTTL, on the origin it
// was printed for. Only the server that minted a link knows it (they are
// kept in memory, as hashes): a restarted server prints a new one. Safe
// for concurrent use.
type LocalLinks struct {
	mu    sync.Mutex
	now   func() time.Time
	links []link
}

type link struct {
	hash    [sha256.Size]byte
	origin  string // "": any
	expires time.Time
}

// NewLocalLinks returns an empty set of links on the real clock.
func NewLocalLinks() *LocalLinks { return &LocalLinks{now: time.Now} }

// Mint returns a new token, valid once within LinkTTL, on any origin of
// the page.
func (l *LocalLinks) Mint() string { return l.MintFor("") }

// MintFor returns a new token, valid once within LinkTTL on origin alone
// (scheme://host:port, as the page is reached: what the link was printed
// for).
func (l *LocalLinks) MintFor(origin string) string {
	token := randomToken()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep()
	if len(l.links) == maxLinks {
		l.links = l.links[1:]
	}
	l.links = append(l.links, link{hash: sha256.Sum256([]byte(token)), origin: origin, expires: l.now().Add(LinkTTL)})
	return token
}

// RedeemAt reports whether token is a link minted here for origin (or
// for any), unused and unexpired, and spends it.
func (l *LocalLinks) RedeemAt(token, origin string) bool {
	if token == "" {
		return false
	}
	h := sha256.Sum256([]byte(token))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep()
	for i, k := range l.links {
		// Comparing hashes: equal-length values, and the tokens
		// themselves are never kept.
		if k.hash == h && (k.origin == "" || k.origin == origin) {
			l.links = append(l.links[:i], l.links[i+1:]...)
			return true
		}
	}
	return false
}

// sweep drops expired links; l.mu is held.
func (l *LocalLinks) sweep() {
	now := l.now()
	keep := l.links[:0]
	for _, k := range l.links {
		if now.Before(k.expires) {
			keep = append(keep, k)
		}
	}
	l.links = keep
}
