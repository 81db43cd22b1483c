package catalog

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest server or tool name accepted, in characters (the
// MCP specification's limit for tool names).
const MaxNameLen = 128

// ErrInvalidName is wrapped by every error ValidName returns.
var ErrInvalidName = errors.New("invalid name")

// reservedNames would reach into JavaScript's object machinery instead of
// naming a tool if they became keys of the `mcp` object: `__proto__` swaps
// the prototype, `constructor` and `prototype` shadow built-ins, and a
// function named `then` makes a server object a thenable, so `await
// mcp.server` would call it.
var reservedNames = map[string]bool{
	"__proto__":   true,
	"constructor": true,
	"prototype":   true,
	"then":        true,
}

// ValidName reports whether s may be used as a server or tool name reachable
// as mcp.<server>.<tool>. Names that are not JavaScript identifiers
// ("get-sum") are allowed: scripts reach them as mcp.ev["get-sum"].
func ValidName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, s)
	case utf8.RuneCountInString(s) > MaxNameLen:
		return fmt.Errorf("%w: %.20q… is longer than %d characters", ErrInvalidName, s, MaxNameLen)
	case reservedNames[s]:
		return fmt.Errorf("%w: %q is reserved in JavaScript objects", ErrInvalidName, s)
	}
	for _, r := range s {
		switch {
		case r == ':':
			// ':' separates server from tool in full names and filters.
			return fmt.Errorf("%w: %q contains ':'", ErrInvalidName, s)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == '\uFEFF':
			return fmt.Errorf("%w: %q contains a control character", ErrInvalidName, s)
		}
	}
	return nil
}
