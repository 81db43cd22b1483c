package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// TestDiscoveryDropsUnboundedSchemas: a server's tool whose input schema is
// too deep or too large to compile safely is left out of the catalog with
// one warning giving the reason, and the server's other tools stay.
func TestDiscoveryDropsUnboundedSchemas(t *testing.T) {
	var wide strings.Builder
	wide.WriteString(`{"type":"object","properties":{`)
	for i := range 1000 {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"p%d":{"type":"string"}`, i)
	}
	wide.WriteString(`}}`)
	tools := []wireTool{
		{Name: "fine", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"}}}`)},
		{Name: "wide", InputSchema: json.RawMessage(wide.String())},
		{Name: "deep", InputSchema: json.RawMessage(strings.Repeat(`{"items":`, 2000) + `{}` + strings.Repeat(`}`, 2000))},
		{Name: "huge", InputSchema: json.RawMessage(`{"enum":["` + strings.Repeat("x", argcheck.MaxSchemaBytes) + `"]}`)},
	}
	var logs bytes.Buffer
	// Warnings only: the Set's other records (the server's state) are
	// not this test's.
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := listed(t, Config{Config: toolsource.Config{Name: "hostile"}}, log, tools, 0)

	names, _ := visibleTools(t, p)
	if got := strings.Join(names, ","); got != "fine,wide" {
		t.Errorf("catalog %s; want fine,wide", got)
	}
	for _, name := range []string{"deep", "huge"} {
		if _, err := call(t, p, "hostile", name, `{}`, CallOptions{}); codeOf(err) != fault.ToolNotFound {
			t.Errorf("%s is callable: %v", name, err)
		}
	}
	want := map[string]string{"hostile:deep": argcheck.ErrSchemaTooDeep.Error(), "hostile:huge": argcheck.ErrSchemaTooLarge.Error()}
	for line := range strings.Lines(logs.String()) {
		var rec struct{ Level, Msg, Tool, Reason string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Level != "WARN" || !strings.Contains(rec.Reason, want[rec.Tool]) || want[rec.Tool] == "" {
			t.Errorf("unexpected log %s", line)
		}
		delete(want, rec.Tool)
	}
	if len(want) > 0 {
		t.Errorf("no warning for %v", want)
	}
}
