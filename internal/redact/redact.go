// Package redact scrubs known secrets out of what leaves the host side: the
// results a script gets from a server (JSON, read as a parser reads it),
// the error messages it sees, health reports and log lines.
//
// It works on known values, not on patterns: whoever holds the secrets (the
// MCP client pool holds header values and credentials in server URLs) adds
// them, and every string that goes out passes through String, or through a
// logger built on Handler. Matching known values catches a secret wherever a
// server or library puts it (an echoed header in a response body, a URL in a
// net/http error), which no pattern could promise.
//
// A secret is masked in each form a service, a library or the host may
// give it before it is echoed: as written; escaped in a URL (query and
// path, "+" or "%20" for a space, by the escaping rules of Go, Python,
// JavaScript and HTML forms, hex digits in either case); inside a JSON
// string; in hex (either case); in base64 and base64url, padded or not,
// encoded alone or anywhere inside a longer base64 text, and escaped in a
// URL query. A Basic credential ("Basic " and base64) is decoded too: its
// user:password and its password are masked wherever they appear (and a
// password configured alone is masked inside the base64 of a Basic header
// a client built from it). Other transforms (other encodings, base64
// broken into lines, compression, encryption) are not matched: a service
// that applies them can hide anything.
package redact

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
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
	// m is rebuilt on Add and read lock-free: String runs on every log
	// line and error, Add once per connect.
	m atomic.Pointer[matcher]
}

// New returns a Redactor that knows secrets.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Add(secrets...)
	return r
}

// Add makes r mask each secret in every form the package doc lists. Values
// shorter than MinLen are ignored, and so is any form of a secret that is
// shorter (or, for hex and base64, shorter than 8 characters: a shorter
// base64 fragment would match unrelated base64 text).
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, s := range secrets {
		for _, v := range forms(s) {
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
	r.m.Store(newMatcher(slices.Collect(maps.Keys(r.secrets))))
}

// String returns s with every known secret masked.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	m := r.m.Load()
	if m == nil {
		return s
	}
	return m.replace(s)
}

// JSON returns the JSON value doc with every known secret masked wherever
// a parser would find it: in each string and object key as it reads once
// unescaped (a secret written \u0041-style or with "\/" is still found),
// and in numbers, which become strings when masked. The result is valid
// JSON when doc is; doc itself is returned when it holds no secret, and is
// not read at all when r knows none. Anything else in doc that holds a
// secret (doc is not JSON) is masked as text.
//
// Most results hold no secret, so that is found out first, in one pass
// over doc and one over what its escaped strings read as; only a result
// that holds one is taken apart token by token.
func (r *Redactor) JSON(doc []byte) []byte {
	if r == nil || len(doc) == 0 {
		return doc
	}
	rep := r.m.Load()
	if rep == nil {
		return doc
	}
	s := string(doc)
	var probe matchWriter
	if !probe.finds(rep, s) && !probe.finds(rep, escapedStrings(s)) {
		return doc
	}
	var out []byte // nil until something is masked
	copied := 0    // s[:copied] is in out
	replace := func(from, to int, with string) {
		if out == nil {
			out = make([]byte, 0, len(s)+len(Mask))
		}
		out = append(out, s[copied:from]...)
		out = append(out, with...)
		copied = to
	}
	var buf []byte
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '"':
			end, escaped := stringEnd(s, i)
			body := s[i+1 : max(end-1, i+1)]
			if escaped {
				// Read as the parser will: the escapes may spell a secret
				// no encoder would write.
				buf = unescape(buf[:0], body)
				if v := string(buf); probe.finds(rep, v) {
					replace(i, end, quote(rep.replace(v)))
				}
			} else if probe.finds(rep, body) {
				replace(i+1, i+1+len(body), rep.replace(body))
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end := i + 1
			for end < len(s) && strings.IndexByte("0123456789+-.eE", s[end]) >= 0 {
				end++
			}
			if num := s[i:end]; probe.finds(rep, num) {
				replace(i, end, quote(rep.replace(num)))
			}
			i = end
		default:
			i++
		}
	}
	if out != nil {
		out = append(out, s[copied:]...)
		s = string(out)
	}
	// What is left outside strings and numbers (doc is not JSON, or a
	// secret spans tokens) is masked as text.
	if probe.finds(rep, s) {
		return []byte(rep.replace(s))
	}
	if out == nil {
		return doc
	}
	return out
}

// escapedStrings is what the strings of the JSON text s that hold an escape
// read as, each followed by a NUL (which no header value or token holds,
// so no secret spans two of them).
func escapedStrings(s string) string {
	var buf []byte
	for i := strings.IndexByte(s, '"'); i >= 0 && i < len(s); {
		end, escaped := stringEnd(s, i)
		if escaped {
			buf = append(unescape(buf, s[i+1:max(end-1, i+1)]), 0)
		}
		next := strings.IndexByte(s[end:], '"')
		if next < 0 {
			break
		}
		i = end + next
	}
	return string(buf)
}

// stringEnd returns the index just past the JSON string starting at
// s[start] (a '"'), and whether it holds an escape.
func stringEnd(s string, start int) (int, bool) {
	escaped := false
	for i := start + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			escaped = true
			i++ // what follows a backslash never ends the string
		case '"':
			return i + 1, escaped
		}
	}
	return len(s), escaped
}

// unescape appends to dst what the body of a JSON string reads as. An
// escape that is not one is kept as written.
func unescape(dst []byte, body string) []byte {
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' || i+1 == len(body) {
			dst = append(dst, c)
			continue
		}
		i++
		switch e := body[i]; e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n := hexRune(body[i+1:])
			if n == 0 {
				dst = append(dst, '\\', 'u')
				continue
			}
			i += n
			if utf16.IsSurrogate(r) {
				if r2, n2 := hexRune(strings.TrimPrefix(body[i+1:], `\u`)); n2 > 0 && strings.HasPrefix(body[i+1:], `\u`) {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 2 + n2
					}
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			dst = append(dst, '\\', e)
		}
	}
	return dst
}

// hexRune reads the four hex digits of a \u escape: the rune and 4, or 0
// when they are not there.
func hexRune(s string) (rune, int) {
	if len(s) < 4 {
		return 0, 0
	}
	v, err := strconv.ParseUint(s[:4], 16, 32)
	if err != nil {
		return 0, 0
	}
	return rune(v), 4
}

// quote is s as a JSON string, HTML characters as they are.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// matchWriter tells whether a Replacer would change a string without
// building the changed one: it compares what the Replacer writes with the
// input, which it writes back in slices of the input where nothing matched.
type matchWriter struct {
	src     string
	pos     int
	differs bool
}

func (w *matchWriter) finds(m *matcher, s string) bool {
	*w = matchWriter{src: s}
	if !m.write(s, func() stringWriter { return w }) {
		return false
	}
	return w.differs || w.pos != len(s)
}

func (w *matchWriter) WriteString(p string) (int, error) {
	if !w.differs && (w.pos+len(p) > len(w.src) || w.src[w.pos:w.pos+len(p)] != p) {
		w.differs = true
	}
	w.pos += len(p)
	return len(p), nil
}

func (w *matchWriter) Write(p []byte) (int, error) { return w.WriteString(string(p)) }

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

// URL is raw with its credentials masked, for printing a configured
// address: userinfo and every query value become Mask (keys and their
// order stay, so a reader can tell which parameter it was), the path and
// fragment as written. An unparsable URL is not echoed at all.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	hasUser, query := u.User != nil, u.RawQuery
	u.User, u.RawQuery, u.ForceQuery = nil, "", false
	out := u.String()
	if hasUser {
		out = strings.Replace(out, "://", "://"+Mask+"@", 1)
	}
	if query != "" {
		parts := strings.Split(query, "&")
		for i, kv := range parts {
			if k, _, ok := strings.Cut(kv, "="); ok {
				parts[i] = k + "=" + Mask
			}
		}
		// The fragment, if any, went out with u.String(); put the query
		// before it.
		frag := ""
		if i := strings.IndexByte(out, '#'); i >= 0 {
			out, frag = out[:i], out[i:]
		}
		out += "?" + strings.Join(parts, "&") + frag
	}
	return out
}
