package redact

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestString(t *testing.T) {
	r := New("tok-SECRET/+1", "abc", "tok-SECRET")
	cases := []struct{ in, want string }{
		{"plain tok-SECRET/+1 here", "plain [REDACTED] here"},
		{"query api_key=tok-SECRET%2F%2B1&x=1", "query api_key=[REDACTED]&x=1"},
		{"path /tok-SECRET%2F+1/", "path /[REDACTED]/"},
		{"shorter secret alone: tok-SECRET.", "shorter secret alone: [REDACTED]."},
		{"too short to be a secret: abc", "too short to be a secret: abc"},
	}
	for _, c := range cases {
		if got := r.String(c.in); got != c.want {
			t.Errorf("String(%q) = %q; want %q", c.in, got, c.want)
		}
	}
	var none *Redactor
	if got := none.String("x tok-SECRET"); got != "x tok-SECRET" {
		t.Errorf("nil redactor changed text: %q", got)
	}
	if got := (&Redactor{}).String("x tok-SECRET"); got != "x tok-SECRET" {
		t.Errorf("empty redactor changed text: %q", got)
	}
}

func TestJSONQuoted(t *testing.T) {
	r := New(`a"b<SECRET>`)
	for _, in := range []string{`{"m":"a\"b<SECRET>"}`, `{"m":"a\"b\u003cSECRET\u003e"}`} {
		if got := r.String(in); strings.Contains(got, "SECRET") {
			t.Errorf("String(%s) = %s", in, got)
		}
	}
}

func TestAddLaterAndConcurrently(t *testing.T) {
	r := New()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_ = r.String("rotated-SECRET-1 and rotated-SECRET-2")
			}
		})
	}
	r.Add("rotated-SECRET-1")
	r.Add("rotated-SECRET-2")
	wg.Wait()
	if got := r.String("rotated-SECRET-1 and rotated-SECRET-2"); got != "[REDACTED] and [REDACTED]" {
		t.Errorf("got %q; both the old and the new value must stay masked", got)
	}
}

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

func TestHandler(t *testing.T) {
	r := New("hdr-SECRET")
	var b strings.Builder
	log := slog.New(r.Handler(slog.NewJSONHandler(&b, nil)))
	log = log.With("bound", "with hdr-SECRET").WithGroup("g")
	log.Info("msg hdr-SECRET",
		"err", errors.New("Post \"http://h/?k=hdr-SECRET\": refused"),
		"str", stringer{"s hdr-SECRET"},
		"n", 42,
		"list", []string{"a", "b"},
		slog.Group("inner", "v", "hdr-SECRET"))
	out := b.String()
	if strings.Contains(out, "SECRET") {
		t.Fatalf("a secret reached the log: %s", out)
	}
	for _, want := range []string{`"n":42`, `"list":["a","b"]`, `"bound":"with [REDACTED]"`, `"inner":{"v":"[REDACTED]"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %s lacks %s", out, want)
		}
	}
}
