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

// reservedNames are the names the sandbox's `mcp` object and its server
// objects answer with undefined (the prelude's `quiet` set, which a test
// keeps in step): `await mcp.x` asks for `then`, JSON.stringify for
// `toJSON`, string conversion for `toString` and `valueOf`, and `__proto__`,
// `constructor` and `prototype` reach into JavaScript's object machinery.
// A server or tool with one of these names could never be called as
// intended, or would be called by accident (a tool named `then` turns its
// server object into a thenable), so it is refused where it is configured
// or listed rather than dropped later.
var reservedNames = map[string]bool{
	"__proto__":   true,
	"constructor": true,
	"inspect":     true,
	"prototype":   true,
	"then":        true,
	"toJSON":      true,
	"toString":    true,
	"valueOf":     true,
}

// ValidName reports why s cannot name a server, a tool or a capability's
// namespace or action, reachable as mcp.<server>.<tool>; nil when it can.
// It is the one name rule: the MCP client's configuration, its tool
// discovery, the capability registry and the executor's catalog all apply it.
// Names that are not JavaScript identifiers ("get-sum") are allowed:
// scripts reach them as mcp.ev["get-sum"].
func ValidName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, s)
	case utf8.RuneCountInString(s) > MaxNameLen:
		return fmt.Errorf("%w: %.20q… is longer than %d characters", ErrInvalidName, s, MaxNameLen)
	case reservedNames[s]:
		return fmt.Errorf("%w: %q is reserved: the sandbox's mcp object answers it with undefined", ErrInvalidName, s)
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
