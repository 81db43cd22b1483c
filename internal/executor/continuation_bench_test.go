package executor_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// typicalWrites is a typical agent script that writes: it keeps a few
// tool results in variables (five items of ~600 bytes, as the suspension
// size test's script does), then makes 20 writes, each checkpointed
// before it is sent.
const typicalWrites = `const items = []
for (let i = 0; i < 5; i++) items.push(await mcp.bench.get({id: i, title: "item " + i, body: "x".repeat(500)}))
const total = items.reduce((n, it) => n + JSON.stringify(it).length, 0)
for (let i = 0; i < 20; i++) await mcp.bench.put({key: "k" + i, value: total + i})
return items.length`

// timedCheckpoints keeps a run's checkpoints in a suspend.Runs store
// under a claim (or nowhere, runs nil), timing each Checkpoint call and
// noting each one's size.
type timedCheckpoints struct {
	runs       suspend.Runs
	id, runner string

	mu    sync.Mutex
	took  []time.Duration
	bytes []int
}

func (c *timedCheckpoints) Checkpoint(ctx context.Context, blob []byte) error {
	start := time.Now()
	var err error
	if c.runs != nil {
		err = c.runs.Checkpoint(ctx, c.id, c.runner, blob)
	}
	c.mu.Lock()
	c.took, c.bytes = append(c.took, time.Since(start)), append(c.bytes, len(blob))
	c.mu.Unlock()
	return err
}

func (c *timedCheckpoints) Uncontinuable(context.Context, string) error { return nil }

// BenchmarkCheckpointBeforeEffect is what continuation adds to an effect:
// the checkpoint taken before it is sent. Each op runs typicalWrites
// (20 writes); µs/effect is the op's time per write, against the same run
// without checkpoints (none); ckpt-bytes is a checkpoint's size as kept,
// store-p50/p99-µs the time its store took to keep it (memory: none, file:
// a body written and synced, then the record rewritten under the
// directory's lock; DynamoDB Local: a BatchWriteItem of the body, a
// GetItem and a conditional PutItem of the record).
//
//	go test -run '^$' -bench CheckpointBeforeEffect -benchtime 50x -count 3 ./internal/executor/
func BenchmarkCheckpointBeforeEffect(b *testing.B) {
	b.Run("none", func(b *testing.B) { benchCheckpoints(b, nil) })
	b.Run("memory", func(b *testing.B) {
		benchCheckpoints(b, func(b *testing.B, id string) *timedCheckpoints { return &timedCheckpoints{} })
	})
	b.Run("file", func(b *testing.B) {
		runs := suspend.NewFileRuns(b.TempDir(), suspend.Options{})
		benchCheckpoints(b, claimedRun(runs))
	})
	b.Run("dynamodb-local", func(b *testing.B) {
		db := dynamolocal.Start(b).Client()
		table := dynamolocal.TableName(b)
		if err := suspend.CreateTable(context.Background(), db, table); err != nil {
			b.Fatal(err)
		}
		benchCheckpoints(b, claimedRun(suspend.NewDynamoRuns(db, table, suspend.Options{})))
	})
}

// claimedRun makes each op's checkpoints go to a run of its own, claimed.
func claimedRun(runs suspend.Runs) func(*testing.B, string) *timedCheckpoints {
	return func(b *testing.B, id string) *timedCheckpoints {
		ctx := context.Background()
		if err := runs.Create(ctx, &suspend.Run{ID: id, Body: []byte(`{}`)}); err != nil {
			b.Fatal(err)
		}
		r, err := runs.Claim(ctx, id, 1, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		return &timedCheckpoints{runs: runs, id: id, runner: r.Runner}
	}
}

func benchCheckpoints(b *testing.B, open func(*testing.B, string) *timedCheckpoints) {
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{benchSource{}}})
	var took []time.Duration
	var sizes []int
	n := 0
	for b.Loop() {
		n++
		req := execution.Request{Code: typicalWrites, TimeoutMS: 60000, ExecutionID: fmt.Sprintf("bench-ckpt-%d-%d", time.Now().UnixNano(), n)}
		var c *timedCheckpoints
		if open != nil {
			b.StopTimer()
			c = open(b, req.ExecutionID)
			b.StartTimer()
			req.Checkpoints = c
		}
		if r := svc.Execute(context.Background(), req); !r.OK {
			b.Fatal(r.Error)
		}
		if c != nil {
			took, sizes = append(took, c.took...), append(sizes, c.bytes...)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/20/1000, "µs/effect")
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	q := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Nanoseconds()) / 1000 }
	b.ReportMetric(q(0.50), "store-p50-µs")
	b.ReportMetric(q(0.99), "store-p99-µs")
	total := 0
	for _, s := range sizes {
		total += s
	}
	b.ReportMetric(float64(total)/float64(len(sizes)), "ckpt-bytes")
	b.ReportMetric(float64(slices.Max(sizes)), "ckpt-max-bytes")
}
