package guestcache_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/pml-sandbox/pml/internal/guest"
)

// BenchmarkCompileWorkers measures a guest engine built without any
// compilation cache (the miss path: compile and snapshot) with wazero's
// compilation workers at 1 (its default) and 2.
func BenchmarkCompileWorkers(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			ctx := experimental.WithCompilationWorkers(context.Background(), workers)
			for b.Loop() {
				eng, err := guest.New(ctx, guest.Options{Prepared: -1, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				_ = eng.Close(ctx)
			}
		})
	}
}
