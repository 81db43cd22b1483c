package analysis

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeQuoted returns the value of a raw string literal ('…' or "…") or of
// a template literal without substitutions (`…`). ok is false for escapes
// whose value is not a plain string name (legacy octal, lone surrogates),
// which the caller treats as dynamic access rather than guessing.
func decodeQuoted(raw []byte) (string, bool) {
	if len(raw) < 2 {
		return "", false
	}
	q := raw[0]
	if (q != '\'' && q != '"' && q != '`') || raw[len(raw)-1] != q {
		return "", false
	}
	body := string(raw[1 : len(raw)-1])
	if q == '`' {
		// Template literals normalise line terminators in their cooked value.
		body = strings.ReplaceAll(body, "\r\n", "\n")
		body = strings.ReplaceAll(body, "\r", "\n")
	}
	return unescape(body)
}

// decodeIdent returns the name of an identifier token, which may spell
// characters as \uXXXX or \u{X…}.
func decodeIdent(raw []byte) (string, bool) {
	s := string(raw)
	if !strings.Contains(s, `\`) {
		return s, true
	}
	return unescape(s)
}

// unescape applies the JavaScript string escapes.
func unescape(s string) (string, bool) {
	if !strings.Contains(s, `\`) {
		return s, utf8.ValidString(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		i++
		if i >= len(s) {
			return "", false
		}
		c = s[i]
		i++
		switch c {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '0':
			if i < len(s) && s[i] >= '0' && s[i] <= '9' {
				return "", false // legacy octal
			}
			b.WriteByte(0)
		case '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return "", false // legacy octal or invalid
		case '\n':
			// line continuation
		case '\r':
			if i < len(s) && s[i] == '\n' {
				i++
			}
		case 'x':
			if i+2 > len(s) {
				return "", false
			}
			v, err := strconv.ParseUint(s[i:i+2], 16, 8)
			if err != nil {
				return "", false
			}
			b.WriteRune(rune(v))
			i += 2
		case 'u':
			r, n, ok := unicodeEscape(s[i:])
			if !ok {
				return "", false
			}
			i += n
			if utf16.IsSurrogate(r) {
				// A pair spelled as two escapes: \uD83D\uDE00.
				if r >= 0xDC00 || !strings.HasPrefix(s[i:], `\u`) {
					return "", false
				}
				lo, m, ok := unicodeEscape(s[i+2:])
				if !ok {
					return "", false
				}
				r = utf16.DecodeRune(r, lo)
				if r == utf8.RuneError {
					return "", false
				}
				i += 2 + m
			}
			b.WriteRune(r)
		default:
			// \u2028 and \u2029 continue lines too; any other escaped
			// character stands for itself.
			r, n := utf8.DecodeRuneInString(s[i-1:])
			i += n - 1
			if r != '\u2028' && r != '\u2029' {
				b.WriteRune(r)
			}
		}
	}
	out := b.String()
	return out, utf8.ValidString(out)
}

// unicodeEscape decodes what follows `\u`: XXXX or {X…}. It returns the rune
// and the number of bytes consumed.
func unicodeEscape(s string) (rune, int, bool) {
	if strings.HasPrefix(s, "{") {
		end := strings.IndexByte(s, '}')
		if end < 2 {
			return 0, 0, false
		}
		v, err := strconv.ParseUint(s[1:end], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, 0, false
		}
		return rune(v), end + 1, true
	}
	if len(s) < 4 {
		return 0, 0, false
	}
	v, err := strconv.ParseUint(s[:4], 16, 16)
	if err != nil {
		return 0, 0, false
	}
	return rune(v), 4, true
}

// StringValue returns the value of a raw string literal ('…' or "…") or
// of a template literal without substitutions, as the engine reads it;
// ok is false where the analysis would not guess (legacy octal escapes,
// lone surrogates).
func StringValue(raw []byte) (string, bool) { return decodeQuoted(raw) }
