package executor_test

import (
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/journal"
)

// BenchmarkScriptCallEffect: 100 writes from one script, in process, each
// journalled (intent, outcome) in memory (no store configured) or in the
// file store (two synced appends per write).
//
//	go test -run '^$' -bench 'ScriptCallEffect' -count 5 ./internal/executor/
func BenchmarkScriptCallEffect(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchCalls(b, executor.New(engine, executor.Options{Sources: []execution.ToolSource{benchSource{}}}), "put")
	})
	b.Run("file", func(b *testing.B) {
		j := journal.NewFile(b.TempDir(), journal.Options{})
		benchCalls(b, executor.New(engine, executor.Options{Sources: []execution.ToolSource{benchSource{}}, Journal: j}), "put")
	})
}
