package argcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

// nested wraps inner in depth copies of open … close.
func nested(open, inner, close string, depth int) string {
	return strings.Repeat(open, depth) + inner + strings.Repeat(close, depth)
}

// wideProperties is a one-level schema with n properties.
func wideProperties(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"type":"string"}`, i)
	}
	b.WriteString(`}}`)
	return b.String()
}

// bigEnum is a shallow schema of about size bytes.
func bigEnum(size int) string {
	var b strings.Builder
	b.WriteString(`{"enum":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"v%d"`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestSchemaBounds: a schema too deep or too large is refused before the
// validator compiles it (its compile cannot be cancelled and costs more
// than linear time in depth: depth 2,000 took 21 s and 70 GB).
func TestSchemaBounds(t *testing.T) {
	// The deepest accepted chain of "properties": each level is two JSON levels.
	deepestOK := nested(`{"properties":{"a":`, `{}`, `}}`, (MaxSchemaDepth-1)/2)
	tests := []struct {
		name   string
		schema string
		want   error // nil: compiles
	}{
		{"items depth 2000", nested(`{"items":`, `{}`, `}`, 2000), ErrSchemaTooDeep},
		{"properties depth 2000", nested(`{"properties":{"a":`, `{}`, `}}`, 1000), ErrSchemaTooDeep},
		{"allOf depth 2000", nested(`{"allOf":[`, `{}`, `]}`, 1000), ErrSchemaTooDeep},
		{"arrays in a default", `{"default":` + nested(`[`, ``, `]`, 2000) + `}`, ErrSchemaTooDeep},
		{"one past the depth", nested(`{"not":`, `{}`, `}`, MaxSchemaDepth), ErrSchemaTooDeep},
		{"unclosed nesting", strings.Repeat(`[`, 100000), ErrSchemaTooDeep},
		{"at the depth", nested(`{"not":`, `{}`, `}`, MaxSchemaDepth-1), nil},
		{"deep realistic", deepestOK, nil},
		{"brackets inside strings", `{"description":"` + strings.Repeat(`[{\"`, 1000) + `"}`, nil},
		{"wide but shallow", wideProperties(1000), nil},
		{"large but under", bigEnum(MaxSchemaBytes - 1024), nil},
		{"over the size", bigEnum(MaxSchemaBytes + 1), ErrSchemaTooLarge},
		{"megabytes", bigEnum(1 << 20), ErrSchemaTooLarge},
		// Whitespace is not counted: a pretty-printed schema compiles if its
		// compact form fits.
		{"indented", `{"type": "object",` + strings.Repeat("\n    ", MaxSchemaBytes) + `"properties": {}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Compile(json.RawMessage(tt.schema))
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestCheckWithUnboundedSchema: a validator over a schema past the bounds
// never compiles it; Check says why, as a TOOL_ERROR (the tool's fault).
func TestCheckWithUnboundedSchema(t *testing.T) {
	v := New(json.RawMessage(nested(`{"items":`, `{}`, `}`, 2000)))
	_, err := v.Check(json.RawMessage(`{}`))
	if err == nil || err.Code != fault.ToolError || !errors.Is(err, ErrSchemaTooDeep) {
		t.Fatalf("got %v, want TOOL_ERROR wrapping ErrSchemaTooDeep", err)
	}
}
