package argcheck

import (
	"errors"
	"fmt"
)

// Bounds on an input schema, checked before it is compiled. The
// validator's Compile takes no context, so it cannot be cancelled, and its
// cost grows faster than linearly with both nesting and width: a chain of
// 2,000 nested schemas took 21 s and 70 GB of allocation. Within these
// bounds the worst shape measured compiles in well under a second, once
// per tool. Schemas of real tools are a few KiB and a dozen levels deep
// (a level of "properties" is two JSON levels: the map and the schema).
const (
	// MaxSchemaBytes bounds an input schema's size, not counting
	// whitespace outside strings (so pretty-printing never matters).
	MaxSchemaBytes = 64 << 10
	// MaxSchemaDepth bounds how deeply JSON objects and arrays nest in an
	// input schema; {} is depth 1.
	MaxSchemaDepth = 64
)

// The errors CheckBounds wraps, for errors.Is.
var (
	ErrSchemaTooLarge = errors.New("input schema is too large")
	ErrSchemaTooDeep  = errors.New("input schema nests too deeply")
)

// CheckBounds reports whether raw is within MaxSchemaBytes and
// MaxSchemaDepth, in one pass that stops at the first byte past either, so
// it is cheap for any input. It does not check that raw is valid JSON (the
// compile that follows does); for invalid JSON it still never reads past
// the bounds.
func CheckBounds(raw []byte) error {
	depth, size := 0, 0
	inString, escaped := false, false
	for _, c := range raw {
		if inString {
			size++
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		} else {
			switch c {
			case ' ', '\t', '\n', '\r':
				continue
			case '"':
				inString = true
			case '{', '[':
				if depth++; depth > MaxSchemaDepth {
					return fmt.Errorf("%w: objects and arrays nest more than %d levels deep", ErrSchemaTooDeep, MaxSchemaDepth)
				}
			case '}', ']':
				depth--
			}
			size++
		}
		if size > MaxSchemaBytes {
			return fmt.Errorf("%w: more than %d bytes (not counting whitespace)", ErrSchemaTooLarge, MaxSchemaBytes)
		}
	}
	return nil
}
