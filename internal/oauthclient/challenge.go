package oauthclient

import (
	"net/http"
	"strings"
)

// Challenge is what a protected resource's WWW-Authenticate header says
// about the Bearer scheme (RFC 6750 §3, RFC 9728 §5.1).
type Challenge struct {
	// Bearer is set when the response carried a Bearer challenge at all.
	Bearer bool
	// ResourceMetadata is the protected resource metadata URL (RFC 9728).
	ResourceMetadata string
	// Scope lists the scopes the resource asks for (space-separated in the
	// header).
	Scope []string
	// Error is the error code: invalid_token, insufficient_scope...
	Error string
}

// ParseChallenge reads the Bearer challenge of a 401 or 403 response. It
// tolerates several challenges on one line and several header lines (RFC
// 9110 §11.6.1), quoted and token parameter values, and ignores every other
// scheme.
func ParseChallenge(h http.Header) Challenge {
	var c Challenge
	for _, line := range h.Values("WWW-Authenticate") {
		for _, ch := range parseChallenges(line) {
			if !strings.EqualFold(ch.scheme, "Bearer") || c.Bearer {
				continue
			}
			c.Bearer = true
			c.ResourceMetadata = ch.params["resource_metadata"]
			c.Scope = strings.Fields(ch.params["scope"])
			c.Error = ch.params["error"]
		}
	}
	return c
}

type challenge struct {
	scheme string
	params map[string]string
}

// parseChallenges splits one header value into challenges: a scheme token
// followed by comma-separated name=value parameters, where a token not
// followed by '=' starts the next challenge.
func parseChallenges(s string) []challenge {
	var out []challenge
	i := 0
	for i < len(s) {
		i = skipSpaceComma(s, i)
		tok, j := readToken(s, i)
		if tok == "" {
			// Not a token: skip one byte and carry on, so that garbage
			// cannot stall the loop.
			i++
			continue
		}
		k := skipSpace(s, j)
		if k < len(s) && s[k] == '=' {
			if len(out) == 0 {
				// A parameter before any scheme: skip it.
				_, i = readValue(s, skipSpace(s, k+1))
				continue
			}
			// A parameter of the current challenge.
			val, next := readValue(s, skipSpace(s, k+1))
			out[len(out)-1].params[strings.ToLower(tok)] = val
			i = next
			continue
		}
		// A new challenge. A token68 after it (Basic abc==) reads as a
		// parameter of that challenge, which is harmless: only Bearer's
		// parameters are used, and Bearer has none of that form.
		out = append(out, challenge{scheme: tok, params: map[string]string{}})
		i = k
	}
	return out
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

func skipSpaceComma(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == ',') {
		i++
	}
	return i
}

// readToken reads an RFC 9110 token.
func readToken(s string, i int) (string, int) {
	j := i
	for j < len(s) && isTokenChar(s[j]) {
		j++
	}
	return s[i:j], j
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// readValue reads a quoted-string (with backslash escapes) or a token.
func readValue(s string, i int) (string, int) {
	if i < len(s) && s[i] == '"' {
		var b strings.Builder
		i++
		for i < len(s) {
			c := s[i]
			switch {
			case c == '\\' && i+1 < len(s):
				b.WriteByte(s[i+1])
				i += 2
			case c == '"':
				return b.String(), i + 1
			default:
				b.WriteByte(c)
				i++
			}
		}
		return b.String(), i
	}
	j := i
	for j < len(s) && s[j] != ',' && s[j] != ' ' && s[j] != '\t' {
		j++
	}
	return s[i:j], j
}
