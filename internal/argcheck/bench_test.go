package argcheck

import (
	"encoding/json"
	"testing"

	"github.com/pml-sandbox/pml/internal/testutil/cputime"
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
			cpu0 := cputime.Process()
			for b.Loop() {
				if _, ferr := v.Check(args); ferr != nil {
					b.Fatal(ferr)
				}
			}
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/op")
		})
	}
}
