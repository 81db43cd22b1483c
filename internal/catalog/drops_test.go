package catalog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestDropLogLogsEachDropOnce(t *testing.T) {
	var buf bytes.Buffer
	d := NewDropLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	ctx := context.Background()
	for range 3 {
		d.Drop(ctx, "kv", "then", "reserved name")
		d.Drop(ctx, "kv", "then", "denied")
		d.Drop(ctx, "kv", "other", "denied")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want one per tool and reason:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{`"tool":"kv:then","reason":"reserved name"`, `"tool":"kv:then","reason":"denied"`, `"tool":"kv:other","reason":"denied"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no line with %s:\n%s", want, buf.String())
		}
	}
}

func TestDropLogIsBounded(t *testing.T) {
	d := NewDropLog(slog.New(slog.DiscardHandler))
	for i := range 3 * maxDropsRemembered {
		d.Drop(context.Background(), "s", strings.Repeat("x", i%200)+string(rune('a'+i%26)), "r")
	}
	if n := len(d.seen); n > maxDropsRemembered {
		t.Fatalf("remembers %d drops; the bound is %d", n, maxDropsRemembered)
	}
}
