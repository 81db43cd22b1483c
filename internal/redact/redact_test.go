package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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

// plain decodes doc and writes it back without escapes: what a script
// reads.
func plain(t testing.TB, doc []byte) string {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, doc)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return b.String()
}

func TestJSON(t *testing.T) {
	r := New("tok-SECRET/+1", "87654321", `a"b<SECRET>`, "abc")
	cases := []struct{ in, want string }{
		{`{"h":"Bearer tok-SECRET/+1"}`, `{"h":"Bearer [REDACTED]"}`},
		{`{"h":"Bearer tok-SECRET\/+1"}`, `{"h":"Bearer [REDACTED]"}`},
		{`{"h":"\u0074ok-SECRET/+1 and \n"}`, `{"h":"[REDACTED] and \n"}`},
		{`{"tok-SECRET/+1":1}`, `{"[REDACTED]":1}`},
		{`{"n":1876543219,"m":-2.5e3}`, `{"n":"1[REDACTED]9","m":-2.5e3}`},
		{`["a\"b\u003cSECRET\u003e", "a\"b<SECRET>"]`, `["[REDACTED]", "[REDACTED]"]`},
		{`{"q":"api_key=tok-SECRET%2F%2B1"}`, `{"q":"api_key=[REDACTED]"}`},
		{`{"short":"abc","none":true,"nil":null}`, `{"short":"abc","none":true,"nil":null}`},
		{`not json tok-SECRET/+1`, `not json [REDACTED]`},
	}
	for _, c := range cases {
		got := r.JSON([]byte(c.in))
		if string(got) != c.want {
			t.Errorf("JSON(%s) = %s; want %s", c.in, got, c.want)
		}
		if json.Valid([]byte(c.in)) && !json.Valid(got) {
			t.Errorf("JSON(%s) = %s: not JSON any more", c.in, got)
		}
	}
	doc := []byte(`{"clean":"nothing to see"}`)
	if got := r.JSON(doc); &got[0] != &doc[0] {
		t.Errorf("a clean document was copied")
	}
	var none *Redactor
	if got := none.JSON([]byte(`"tok-SECRET/+1"`)); string(got) != `"tok-SECRET/+1"` {
		t.Errorf("nil redactor changed the document: %s", got)
	}
}

// FuzzJSON: whatever the document, what a parser reads from the masked
// one holds no secret, and a JSON document stays JSON.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"a":"x-SECRET-1"}`, `["\u0078-SECRET-1"]`, `{"x-SECRET-1":[1,2,{"b":"x\/SECRET"}]}`, `12345678`, `"\\x-SECRET-1\\"`} {
		f.Add([]byte(s))
	}
	r := New("x-SECRET-1", "12345678", "x/SECRET")
	f.Fuzz(func(t *testing.T, doc []byte) {
		if !json.Valid(doc) {
			return
		}
		out := r.JSON(doc)
		if !json.Valid(out) {
			t.Fatalf("JSON(%s) = %s: not JSON", doc, out)
		}
		if p := plain(t, out); strings.Contains(p, "x-SECRET-1") || strings.Contains(p, "x/SECRET") || strings.Contains(p, "12345678") {
			t.Fatalf("JSON(%s) = %s: a secret is left: %s", doc, out, p)
		}
	})
}

// BenchmarkJSON: a 1 MiB result of a server that is sent secrets, with
// none in it, and with one; and a server sent none.
func BenchmarkJSON(b *testing.B) {
	var doc bytes.Buffer
	doc.WriteString(`{"items":[`)
	for i := 0; doc.Len() < 1<<20; i++ {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"id":%d,"name":"item %d","text":"line one\nline \"two\"","tags":["a","b"],"ok":true}`, i, i)
	}
	doc.WriteString(`]}`)
	clean := doc.Bytes()
	leaked := bytes.Replace(clean, []byte(`"item 7"`), []byte(`"Bearer tok-SECRET-4711"`), 1)
	for _, bc := range []struct {
		name string
		r    *Redactor
		doc  []byte
	}{
		{"clean", New("tok-SECRET-4711", "k-SECRET-apikey-3", "q-SECRET/+=42"), clean},
		{"one secret", New("tok-SECRET-4711", "k-SECRET-apikey-3", "q-SECRET/+=42"), leaked},
		{"no secrets", New(), clean},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.doc)))
			b.ReportAllocs()
			for b.Loop() {
				_ = bc.r.JSON(bc.doc)
			}
		})
	}
}

// benchSecrets are 20 secrets of the kinds a deployment configures: API
// keys, bearer tokens, a Basic credential, passwords with URL-special
// characters.
func benchSecrets() []string {
	out := make([]string, 0, 20)
	for i := range 16 {
		out = append(out, fmt.Sprintf("sk-live-%02d-9f8e7d6c5b4a3210ZYXWvuts", i))
	}
	return append(out,
		"Basic YWxpY2U6czNjcjN0LXBhc3Mtd29yZA==",
		"ghp_0123456789abcdefABCDEF0123456789abcd",
		"p@ss word+/with=specials!",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJib3QifQ.c2lnbmF0dXJl")
}

// benchText is 4 KiB of what String sees: log lines, an error with a URL,
// a JSON result with a base64 payload and hex digests; none of it secret.
func benchText() string {
	var b strings.Builder
	payload := make([]byte, 600)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for i := 0; b.Len() < 4<<10; i++ {
		fmt.Fprintf(&b, "time=2025-01-0%dT10:00:00Z level=INFO msg=\"tool call\" tool=search.query id=%d took=12ms\n", i%9+1, i)
		fmt.Fprintf(&b, "Post \"https://api.example.com/v1/items?page=%d&q=red+shoes\": dial tcp 10.0.0.%d:443: connection refused\n", i, i)
		fmt.Fprintf(&b, `{"id":%d,"sha":"%x","data":"%s"}`+"\n", i, payload[i:i+20], base64.StdEncoding.EncodeToString(payload[i*30:i*30+90]))
	}
	return b.String()[:4<<10]
}

// BenchmarkString: String on 4 KiB of text with 20 secrets known, with
// none of them in it (the common case), with two, and made of near misses
// (a secret but its last byte, over and over), where every few bytes a
// secret may start.
func BenchmarkString(b *testing.B) {
	secrets := benchSecrets()
	r := New(secrets...)
	clean := benchText()
	leaked := clean[:1000] + secrets[3] + clean[1000+len(secrets[3]):3000] + secrets[17] + clean[3000+len(secrets[17]):]
	near := strings.Repeat(secrets[0][:len(secrets[0])-1]+" ", 4<<10)[:4<<10]
	for _, bc := range []struct{ name, text string }{{"clean", clean}, {"two secrets", leaked}, {"near misses", near}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.text)))
			b.ReportAllocs()
			for b.Loop() {
				_ = r.String(bc.text)
			}
		})
	}
}
