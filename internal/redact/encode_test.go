package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// Secrets of each length modulo 3, so that each way a base64 encoding can
// end is met; unrelated, so that none is a prefix of another.
var (
	key28 = "sk-live-9f8e7d6c5b4a3210ZYXW"  // 28 = 3·9+1
	key29 = "ghp_Q1w2E3r4T5y6U7i8O9p0AsDfG" // 29 = 3·9+2
	key30 = "xoxb-1234-5678-abcdefghijklmn" + "o"
	// keyB64 encodes to "+" and "/" at every alignment.
	keyB64 = "tok~?>~?>~?>-0123456789-zz"
	// urlPass needs escaping everywhere in a URL, and differently by
	// encoder: "@", " ", "+", "/", and "!*()" that some leave as they are.
	urlPass = "p@ss word+/x!*(1)"
	// basicHdr is a configured Basic header; its password and the decoded
	// credentials are secrets too.
	basicUser = "alice"
	basicPass = "s3cr3t-pass-word"
	basicHdr  = "Basic " + base64.StdEncoding.EncodeToString([]byte(basicUser+":"+basicPass))
	// keyAsUser: APIs that take the key as the Basic user, with no password.
	keyAsUser    = "sk_user_key_0123456789"
	basicKeyUser = "basic  " + base64.StdEncoding.EncodeToString([]byte(keyAsUser+":"))
	// plainPass is a password configured alone, which a client sends in a
	// Basic header (base64 of "user:" + password), 4+23 bytes: no partial
	// group at the end.
	plainPass = "correct-horse-battery-9"
)

func hostileRedactor() *Redactor {
	return New(key28, key29, key30, keyB64, urlPass, basicHdr, basicKeyUser, plainPass)
}

func flip(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = ^c
	}
	return out
}

// stableRegion finds, without knowing how base64 works, the characters of
// enc(pre+key+suf) that are set by key alone: those that change when every
// bit of key flips and not when every bit around it does.
func stableRegion(enc *base64.Encoding, pre, key, suf []byte) (int, int) {
	cat := func(p ...[]byte) []byte { return bytes.Join(p, nil) }
	a := enc.EncodeToString(cat(pre, key, suf))
	b := enc.EncodeToString(cat(pre, flip(key), suf))
	c := enc.EncodeToString(cat(flip(pre), key, flip(suf)))
	start, end := -1, -1
	for i := range a {
		if a[i] != b[i] && a[i] == c[i] {
			if start < 0 {
				start = i
			}
			end = i + 1
		}
	}
	return start, end
}

type hostileCase struct {
	name, text, want string
}

// hostileCases are echoes of configured secrets as a service or the host
// may encode them, and what String must make of each.
func hostileCases() []hostileCase {
	var cs []hostileCase
	other := []byte("other data around the secret in the same base64 text: ") // 54 bytes
	tail := append([]byte{0xff, 0xfe}, "and after it"...)
	for _, key := range []string{key28, key29, key30, keyB64} {
		for _, enc := range []struct {
			name string
			e    *base64.Encoding
		}{{"std", base64.StdEncoding}, {"url", base64.URLEncoding}, {"rawstd", base64.RawStdEncoding}, {"rawurl", base64.RawURLEncoding}} {
			// Alone: the service encoded the secret itself.
			cs = append(cs, hostileCase{"base64/" + enc.name + "/alone/" + key[:4],
				"echo " + enc.e.EncodeToString([]byte(key)) + " end", "echo " + Mask + " end"})
			// Inside a longer text at each offset modulo 3 (len(other) is
			// a multiple of 3): each gives the key's bytes another place
			// in the groups of 3 that base64 encodes together.
			for off := range 3 {
				pre := other[:len(other)-off]
				b := enc.e.EncodeToString(bytes.Join([][]byte{pre, []byte(key), tail}, nil))
				s, e := stableRegion(enc.e, pre, []byte(key), tail)
				cs = append(cs, hostileCase{"base64/" + enc.name + "/offset" + string(rune('0'+(len(pre)%3))) + "/" + key[:4],
					"payload " + b, "payload " + b[:s] + Mask + b[e:]})
			}
		}
	}
	// A base64 value in a URL query, "+", "/" and "=" escaped: every
	// encoder of a query value does that alike.
	cs = append(cs, hostileCase{"base64/query/alone", "GET /?t=" + url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(keyB64))), "GET /?t=" + Mask})
	for off := range 3 {
		pre := other[:len(other)-off]
		b := base64.StdEncoding.EncodeToString(bytes.Join([][]byte{pre, []byte(keyB64), tail}, nil))
		s, e := stableRegion(base64.StdEncoding, pre, []byte(keyB64), tail)
		if !strings.ContainsAny(b[s:e], "+/") {
			panic("keyB64 does not test escaping")
		}
		cs = append(cs, hostileCase{"base64/query/offset" + string(rune('0'+(len(pre)%3))),
			"GET /?t=" + url.QueryEscape(b), "GET /?t=" + url.QueryEscape(b[:s]) + Mask + url.QueryEscape(b[e:])})
	}
	h := hex.EncodeToString([]byte(key28))
	inHex := hex.EncodeToString([]byte("\x01" + key28 + "\x02"))
	cs = append(cs,
		hostileCase{"hex/lower", "digest " + h, "digest " + Mask},
		hostileCase{"hex/upper", "digest " + strings.ToUpper(h), "digest " + Mask},
		hostileCase{"hex/inside", "dump " + inHex, "dump 01" + Mask + "02"},
		hostileCase{"hex/inside/upper", "dump " + strings.ToUpper(inHex), "dump 01" + Mask + "02"},
	)
	for _, u := range []struct{ name, form string }{
		{"query", url.QueryEscape(urlPass)}, // covered before: the control
		{"rfc3986", "p%40ss%20word%2B%2Fx%21%2A%281%29"},
		{"encodeURIComponent", "p%40ss%20word%2B%2Fx!*(1)"},
		{"form", "p%40ss+word%2B%2Fx%21*%281%29"}, // URLSearchParams, Java
		{"lowerhex", "p%40ss+word%2b%2fx%21%2a%281%29"},
		{"pythonquote", "p%40ss%20word%2B/x%21%2A%281%29"},
	} {
		cs = append(cs, hostileCase{"url/" + u.name,
			"GET https://h/v1?pw=" + u.form + "&x=1: 401", "GET https://h/v1?pw=" + Mask + "&x=1: 401"})
	}
	pp := base64.StdEncoding.EncodeToString([]byte("bob:" + plainPass))
	s, e := stableRegion(base64.StdEncoding, []byte("bob:"), []byte(plainPass), nil)
	cs = append(cs,
		hostileCase{"basic/decoded", "bad credentials " + basicUser + ":" + basicPass, "bad credentials " + Mask},
		hostileCase{"basic/password", "password " + basicPass + " expired", "password " + Mask + " expired"},
		hostileCase{"basic/key-as-user", "unknown key " + keyAsUser, "unknown key " + Mask},
		hostileCase{"basic/of-plain-password", "sent Authorization: Basic " + pp, "sent Authorization: Basic " + pp[:s] + Mask + pp[e:]},
	)
	return cs
}

func TestStringEncodings(t *testing.T) {
	r := hostileRedactor()
	for _, c := range hostileCases() {
		if got := r.String(c.text); got != c.want {
			t.Errorf("%s: String(%q)\n = %q\nwant %q", c.name, c.text, got, c.want)
		}
	}
}

// TestJSONEncodings: the same echoes in a JSON result, written by an
// encoder that escapes "/" and one that does not.
func TestJSONEncodings(t *testing.T) {
	r := hostileRedactor()
	for _, c := range hostileCases() {
		q, _ := json.Marshal(c.text)
		for _, doc := range []string{`{"echo":` + string(q) + `}`, `{"echo":` + strings.ReplaceAll(string(q), "/", `\/`) + `}`} {
			out := r.JSON([]byte(doc))
			var m map[string]string
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("%s: JSON(%s) = %s: %v", c.name, doc, out, err)
			}
			if m["echo"] != c.want {
				t.Errorf("%s: JSON(%s)\n = %s\nwant %q", c.name, doc, out, c.want)
			}
		}
	}
}

func TestHandlerEncodings(t *testing.T) {
	r := hostileRedactor()
	var b strings.Builder
	log := slog.New(r.Handler(slog.NewTextHandler(&b, nil)))
	var want []string
	for _, c := range hostileCases() {
		log.Info("echo "+c.text, "attr", c.text, "err", errors.New(c.text))
		want = append(want, c.want)
	}
	out := b.String()
	for _, c := range hostileCases() {
		if c.text != c.want && strings.Contains(out, c.text[strings.IndexByte(c.text, ' ')+1:]) {
			t.Errorf("%s: the echo reached the log whole: %s", c.name, c.text)
		}
	}
	for _, leak := range []string{basicPass, keyAsUser, strings.ToUpper(hex.EncodeToString([]byte(key29))), base64.RawURLEncoding.EncodeToString([]byte(key30))} {
		if strings.Contains(out, leak) {
			t.Errorf("%s reached the log", leak)
		}
	}
	if n := strings.Count(out, Mask); n < 3*len(want) {
		t.Errorf("log has %d masks; want at least %d:\n%s", n, 3*len(want), out)
	}
}

// TestFormsFloor: no form is shorter than MinLen, no hex or base64 form
// shorter than minEncoded, and text around such forms of short secrets is
// left alone.
func TestFormsFloor(t *testing.T) {
	for _, s := range []string{"abcd", "abcde", "abcdef", "a b+", key28, urlPass, basicHdr} {
		enc := map[string]bool{}
		for _, v := range encodedForms(s) {
			enc[v] = true
		}
		for _, v := range forms(s) {
			if len(v) < MinLen || enc[v] && len(v) < minEncoded {
				t.Errorf("forms(%q) has %q", s, v)
			}
		}
	}
	r := New("abcd", "abcde")
	// base64("xabcde") and base64("xxabcd") hold 6- and 5-character middle
	// parts of the secrets: too short to be masked inside other base64.
	for _, in := range []string{"eGFiY2Rl", "eHhhYmNk", "Zm9vYmFy"} {
		if got := r.String(in); got != in {
			t.Errorf("String(%q) = %q", in, got)
		}
	}
	// Alone and padded, a short secret's base64 is still masked.
	if got := r.String("YWJjZA=="); got != Mask {
		t.Errorf("String(base64(abcd)) = %q", got)
	}
}

// TestNoShredding: text that holds no secret, base64 and hex among it,
// comes back as it was.
func TestNoShredding(t *testing.T) {
	r := hostileRedactor()
	r.Add(benchSecrets()...)
	random := make([]byte, 64<<10)
	x := uint32(1)
	for i := range random {
		x = x*1664525 + 1013904223
		random[i] = byte(x >> 24)
	}
	for _, in := range []string{benchText(), base64.StdEncoding.EncodeToString(random), hex.EncodeToString(random)} {
		if got := r.String(in); got != in {
			t.Errorf("String changed text that holds no secret")
		}
	}
}

func TestBasicSecrets(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		in   string
		want []string
	}{
		{"Basic " + b64("alice:pw:with:colons"), []string{"alice:pw:with:colons", "pw:with:colons"}},
		{"BASIC\t" + base64.RawStdEncoding.EncodeToString([]byte("u:secret")), []string{"u:secret", "secret"}},
		{"Basic " + b64("apikey123:"), []string{"apikey123:", "apikey123"}},
		{"Basic " + b64("apikey123"), []string{"apikey123", "apikey123"}},
		{"Basic not*base64", nil},
		{"Bearer " + b64("alice:pw"), nil},
		{"Basic " + b64("a:b") + " extra", nil},
	}
	for _, c := range cases {
		if got := basicSecrets(c.in); !slices.Equal(got, c.want) {
			t.Errorf("basicSecrets(%q) = %q; want %q", c.in, got, c.want)
		}
	}
	// The user beside a password is no secret; a password under MinLen is
	// none either, but the credentials it is part of are.
	r := New("Basic " + b64("admin:pw"))
	if got := r.String("admin pw admin:pw"); got != "admin pw "+Mask {
		t.Errorf("got %q", got)
	}
}
