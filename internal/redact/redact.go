// Package redact scrubs known secrets out of text before it leaves the host
// side: the error messages a script sees, health reports and log lines.
//
// It works on known values, not on patterns: whoever holds the secrets (the
// MCP client pool holds header values and credentials in server URLs) adds
// them, and every string that goes out passes through String, or through a
// logger built on Handler. Matching known values catches a secret wherever a
// server or library puts it (an echoed header in a response body, a URL in a
// net/http error), which no pattern could promise.
package redact

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Mask replaces every secret.
const Mask = "[REDACTED]"

// MinLen is the shortest value treated as a secret. Masking "1" or "on"
// would shred every message that mentions them while protecting nothing: a
// credential that short is no credential.
const MinLen = 4

// Redactor replaces known secrets with Mask. The zero value and a nil
// *Redactor know no secrets. It is safe for concurrent use; secrets can be
// added at any time (resolved header values become known at connect time)
// and are never forgotten, so an old value of a rotated secret stays masked.
type Redactor struct {
	mu      sync.Mutex // serialises Add
	secrets map[string]bool
	// rep is rebuilt on Add and read lock-free: String runs on every log
	// line and error, Add once per connect.
	rep atomic.Pointer[strings.Replacer]
}

// New returns a Redactor that knows secrets.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Add(secrets...)
	return r
}

// Add makes r mask each secret, in its plain form and in the forms it takes
// when quoted in a URL or a JSON string. Values shorter than MinLen are
// ignored.
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, s := range secrets {
		if len(s) < MinLen {
			continue
		}
		for _, v := range variants(s) {
			if !r.secrets[v] {
				if r.secrets == nil {
					r.secrets = map[string]bool{}
				}
				r.secrets[v] = true
				changed = true
			}
		}
	}
	if !changed {
		return
	}
	all := make([]string, 0, len(r.secrets))
	for s := range r.secrets {
		all = append(all, s)
	}
	// strings.Replacer tries its old strings in argument order at each
	// position: longest first, so that a secret containing another is
	// masked whole.
	slices.SortFunc(all, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	pairs := make([]string, 0, 2*len(all))
	for _, s := range all {
		pairs = append(pairs, s, Mask)
	}
	r.rep.Store(strings.NewReplacer(pairs...))
}

// variants lists s as it appears in a URL query or path and inside a JSON
// string, where those differ from s.
func variants(s string) []string {
	out := []string{s}
	add := func(v string) {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	add(url.QueryEscape(s))
	add(url.PathEscape(s))
	// Encoders differ on HTML characters: encoding/json writes "<" as
	// \u003c by default, most others write it as is.
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(s) == nil {
			q := strings.TrimSuffix(b.String(), "\n")
			add(q[1 : len(q)-1])
		}
	}
	return out
}

// String returns s with every known secret masked.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	rep := r.rep.Load()
	if rep == nil {
		return s
	}
	return rep.Replace(s)
}

// Handler wraps h so that the message and every attribute of each record
// are scrubbed by r before h sees them. Attributes of other kinds than
// string are scrubbed through their text (an error's Error(), a Stringer's
// String()) and replaced by it only when it held a secret, so that numbers
// and structured values keep their type in the output.
func (r *Redactor) Handler(h slog.Handler) slog.Handler {
	return &handler{h: h, r: r}
}

type handler struct {
	h slog.Handler
	r *Redactor
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.r.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	scrubbed := make([]slog.Attr, len(as))
	for i, a := range as {
		scrubbed[i] = h.r.attr(a)
	}
	return &handler{h: h.h.WithAttrs(scrubbed), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{h: h.h.WithGroup(name), r: h.r}
}

func (r *Redactor) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.String(v.String()))
	case slog.KindGroup:
		as := v.Group()
		scrubbed := make([]slog.Attr, len(as))
		for i, g := range as {
			scrubbed[i] = r.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(scrubbed...)}
	case slog.KindAny:
		text := fmt.Sprint(v.Any())
		if s := r.String(text); s != text {
			return slog.String(a.Key, s)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
