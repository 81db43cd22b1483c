package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// BenchmarkEffect is what the journal adds to one effect: its intent
// (durable before the call is sent) and its outcome (after), with
// arguments and a result of about 100 bytes each, as a kv_set's. Each
// execution makes at most MaxEffects effects, then the next starts. p50
// and p99 are of the pair's wall time; the file store syncs twice.
//
//	go test -run '^$' -bench Effect -benchtime 2000x ./internal/journal/
func BenchmarkEffect(b *testing.B) {
	b.Run("file", func(b *testing.B) { benchEffect(b, journal.NewFile(b.TempDir(), journal.Options{})) })
	b.Run("dynamodb-local", func(b *testing.B) {
		db := dynamolocal.Start(b).Client()
		table := dynamolocal.TableName(b)
		if err := suspend.CreateTable(context.Background(), db, table); err != nil {
			b.Fatal(err)
		}
		benchEffect(b, journal.NewDynamo(db, table, journal.Options{}))
	})
	b.Run("memory", func(b *testing.B) { benchEffect(b, journal.NewMemory()) })
}

func benchEffect(b *testing.B, s journal.Store) {
	ctx := context.Background()
	args := json.RawMessage(`{"key":"customer-42","value":{"name":"Ada Lovelace","email":"ada@example.com","plan":"pro","seats":12}}`)
	result := json.RawMessage(`{"key":"customer-42","stored":true,"version":7,"at":"2026-11-29T05:00:00Z","etag":"9f8e7d6c5b4a"}`)
	took := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		exec, call := fmt.Sprintf("bench-%d", i/journal.MaxEffects), i%journal.MaxEffects+1
		i++
		start := time.Now()
		e := &journal.Entry{ExecutionID: exec, CallID: call, Server: "kv", Tool: "kv_set", Key: journal.Key(exec, call), Args: args, Honours: true}
		if _, err := s.Intend(ctx, e); err != nil {
			b.Fatal(err)
		}
		if err := s.Settle(ctx, exec, call, journal.Outcome{Status: journal.Applied, Result: result}); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	q := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Nanoseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}
