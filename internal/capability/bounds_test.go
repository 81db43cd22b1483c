package capability_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/fault"
)

// TestSaveRefusesUnboundedSchemas: POST /capabilities reaches Save, so a
// schema too deep or too large to compile safely is an INVALID_REQUEST,
// refused before the (uncancellable) compile.
func TestSaveRefusesUnboundedSchemas(t *testing.T) {
	reg := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	tests := []struct {
		name   string
		schema string
		want   error
	}{
		{"depth 2000", strings.Repeat(`{"items":`, 2000) + `{}` + strings.Repeat(`}`, 2000), argcheck.ErrSchemaTooDeep},
		{"too large", `{"enum":["` + strings.Repeat("x", argcheck.MaxSchemaBytes) + `"]}`, argcheck.ErrSchemaTooLarge},
		{"fine", `{"type":"object","properties":{"x":{"type":"number"}}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reg.Save(context.Background(), capability.Capability{Name: "b:x", Code: "return 1", InputSchema: json.RawMessage(tt.schema)}, nil)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if fault.CodeOf(err) != fault.InvalidRequest || !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want INVALID_REQUEST wrapping %v", err, tt.want)
			}
		})
	}
}
