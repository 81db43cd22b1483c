package argcheck

import (
	"encoding/json"
	"testing"
)

// BenchmarkCheck is one call's argument check: the demo server's
// word_count schema (the tool pml bench's MCP ratio calls), and a schema
// that accepts any object.
func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct{ name, schema string }{
		{"word_count", `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`},
		{"any_object", `{"type":"object"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := New(json.RawMessage(bc.schema))
			args := json.RawMessage(`{"text":"one two three"}`)
			b.ReportAllocs()
			for b.Loop() {
				if _, ferr := v.Check(args); ferr != nil {
					b.Fatal(ferr)
				}
			}
		})
	}
}
