package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
)

// minEncoded is the shortest hex or base64 form of a secret that is
// masked. A base64 form is matched anywhere in a longer base64 text (that
// is the point of its middle parts, below), so it must not turn up there
// by chance: at 8 characters it stands for 48 bits of the secret, more
// than the 32 of a plain secret MinLen long, so it never matches on less
// of a secret than a plain match needs, and a chance match in random
// base64 (an image, a file) is 2⁻⁴⁸ a position and form. Shorter middle
// parts (a 4-byte secret leaves 4 or 5 characters) stand for under 3
// bytes of the secret and would shred base64 documents that merely
// contain a common word. Hex forms are always long enough (2·MinLen).
const minEncoded = 8

// forms lists what the secret s may look like when a service, a library or
// the host echoes it: as written, quoted (URL, JSON) and encoded (hex,
// base64); for a Basic credential, also what it decodes to. A form shorter
// than MinLen, or an encoded one shorter than minEncoded, is left out.
func forms(s string) []string {
	if len(s) < MinLen {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	add := func(min int, vs ...string) {
		for _, v := range vs {
			if len(v) >= min && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	for _, p := range append([]string{s}, basicSecrets(s)...) {
		add(MinLen, p)
		add(MinLen, urlForms(p)...)
		add(MinLen, jsonForms(p)...)
		add(minEncoded, encodedForms(p)...)
	}
	return out
}

// basicSecrets is, for an HTTP Basic credential ("Basic " and the base64
// of user:password, RFC 7617; the scheme in any case), what else in it is
// secret: the decoded user:password, which a server may quote, and the
// password alone. With no password (APIs that take a key as the user, as
// "key:") the user is the secret instead; beside a password it is an
// identifier, and masking a name like "admin" everywhere would shred
// messages for nothing. Anything else is no Basic credential: nil.
func basicSecrets(s string) []string {
	f := strings.Fields(s)
	if len(f) != 2 || !strings.EqualFold(f[0], "Basic") {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		// Some clients leave the padding out.
		if b, err = base64.RawStdEncoding.DecodeString(f[1]); err != nil {
			return nil
		}
	}
	dec := string(b)
	user, pass, _ := strings.Cut(dec, ":")
	if pass == "" {
		return []string{dec, user}
	}
	return []string{dec, pass}
}

// urlForms is s as URL encoders escape it in a query or a path. They
// differ on the space ("+" or "%20"), on which characters they leave as
// they are, and on the case of the hex digits, so each one's form is
// listed; a secret of letters, digits and "-._" has one form, itself.
func urlForms(s string) []string {
	const unreserved = "-._~" // RFC 3986, besides letters and digits
	out := []string{
		url.QueryEscape(s),                    // Go; Python's quote_plus
		url.PathEscape(s),                     // Go, a path segment
		(&url.URL{Path: s}).EscapedPath(),     // Go, a whole path
		url.UserPassword("", s).String()[1:],  // Go, a password in a URL (after ":")
		percent(s, unreserved, "%20"),         // RFC 3986 strictly; Python's quote(safe="")
		percent(s, unreserved+"/", "%20"),     // Python's quote
		percent(s, unreserved+"!*'()", "%20"), // JavaScript's encodeURIComponent
		percent(s, "-._*", "+"),               // HTML forms: URLSearchParams, Java's URLEncoder
	}
	for i := range len(out) {
		if strings.IndexByte(out[i], '%') >= 0 {
			out = append(out, lowerEscapes(out[i])) // RFC 3986 allows %2f for %2F
		}
	}
	return out
}

// percent escapes every byte of s as %XX but letters, digits and those in
// keep, and writes a space as space.
func percent(s, keep, space string) string {
	const digits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(keep, c) >= 0:
			b.WriteByte(c)
		case c == ' ':
			b.WriteString(space)
		default:
			b.WriteByte('%')
			b.WriteByte(digits[c>>4])
			b.WriteByte(digits[c&15])
		}
	}
	return b.String()
}

// lowerEscapes is the URL-escaped s with the hex digits of its escapes in
// lower case.
func lowerEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = lowerHex(b[i+1])
			b[i+2] = lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonForms is s inside a JSON string. Encoders differ on HTML characters:
// encoding/json writes "<" as \u003c by default, most others write it as
// is.
func jsonForms(s string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(s) == nil {
			q := strings.TrimSuffix(b.String(), "\n")
			out = append(out, q[1:len(q)-1])
		}
	}
	return out
}

// encodedForms is s in hex (either case) and in base64 and base64url: the
// whole encoding, padded or not, for a secret encoded alone, and the parts
// of it that stay the same wherever s sits in a longer encoded text (see
// base64Middle); the standard alphabet also as a URL query escapes it
// ("+", "/", "=" escaped, as every query encoder does).
func encodedForms(s string) []string {
	h := hex.EncodeToString([]byte(s))
	out := []string{h, strings.ToUpper(h)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		var b64 []string
		b64 = append(b64, enc.EncodeToString([]byte(s)), enc.WithPadding(base64.NoPadding).EncodeToString([]byte(s)))
		for offset := range 3 {
			b64 = append(b64, base64Middle(enc, s, offset))
		}
		out = append(out, b64...)
		if enc == base64.StdEncoding {
			for _, v := range b64 {
				out = append(out, url.QueryEscape(v))
			}
		}
	}
	return out
}

// base64Middle is the part of enc's encoding of a text in which s starts
// offset bytes (modulo 3) into a group that is set by s alone.
//
// Base64 writes each 3 bytes as 4 characters of 6 bits each, so a
// character holds bits of two neighbouring bytes. Where s starts in its
// group of 3 (0, 1 or 2 bytes in) decides how its bits fall into
// characters: the three offsets give three unrelated encodings of s, and
// a service echoing s inside a longer encoded text (or someone putting 1
// or 2 bytes in front of it on purpose) gives one of them. In each, the
// first and last characters touching s also hold bits of what is around
// it, which can be anything; the characters between them hold s's bits
// only and are the same whatever surrounds s. Those are the middle part:
// with s's bits at [8·offset, 8·(offset+len(s))) of the stream, the
// characters whose 6 bits lie wholly inside that range. Masking it leaves
// at most 4 bits of s at either end.
func base64Middle(enc *base64.Encoding, s string, offset int) string {
	buf := make([]byte, offset+len(s))
	copy(buf[offset:], s)
	e := enc.WithPadding(base64.NoPadding).EncodeToString(buf)
	first := (8*offset + 5) / 6      // the first character starting at or after s's first bit
	end := 8 * (offset + len(s)) / 6 // past the last character ending at or before s's last bit
	return e[first:end]
}
