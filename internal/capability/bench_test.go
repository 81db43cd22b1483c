package capability_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// scaleCaps is n capabilities in n/10 namespaces, each with a description
// and an input schema as agents save them, plus math:sum.
func scaleCaps(n int) []capability.Capability {
	caps := []capability.Capability{{Name: "math:sum", Code: "return args.xs.reduce((a, b) => a + b, 0)", Description: "adds numbers"}}
	for i := range n {
		caps = append(caps, capability.Capability{
			Name:        fmt.Sprintf("ns%d:action%d", i/10, i),
			Code:        fmt.Sprintf("const r = await mcp.demo.add({a: args.a, b: %d}); return r", i),
			Description: fmt.Sprintf("adds %d to a number, a learned program saved by an agent (number %d)", i, i),
			InputSchema: []byte(`{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`),
		})
	}
	return caps
}

// scaleSizes are the registry sizes BenchmarkCapabilitiesAtScale compares.
var scaleSizes = []int{0, 1000, 10000}

// BenchmarkCapabilitiesAtScale measures an execution through the service
// as internal/app wires it (demo tools in process, the capability source
// with its index, counter and version cache, capability runs in process)
// with 0, 1,000 and 10,000 capabilities saved, on the file registry and on
// DynamoDB Local, for `return 1` and for one capability call. Issue 25's
// target: from 0 to 10,000 each grows by at most 10 %.
//
// The machine it runs on is shared and its load drifts, so the sizes are
// not measured one after another: each iteration runs the script once on
// each size's service, and the figures are the median per size (p50-ms@N),
// the growth from the smallest to the largest (growth-%), and on DynamoDB
// the requests an execution sent (ddb-req/exec). ns/op is the time of one
// iteration, all sizes together.
//
//	go test -run '^$' -bench CapabilitiesAtScale -benchtime 300x ./internal/capability/
func BenchmarkCapabilitiesAtScale(b *testing.B) {
	ctx := context.Background()
	for _, store := range []string{"file", "dynamodb"} {
		procs := make([]*proc, len(scaleSizes))
		var counters []*opCounter
		for i, n := range scaleSizes {
			var reg capability.Registry
			switch store {
			case "file":
				path := filepath.Join(b.TempDir(), "caps.json")
				if err := capability.SeedFile(path, scaleCaps(n)); err != nil {
					b.Fatal(err)
				}
				fr := capability.NewFileRegistry(path)
				b.Cleanup(func() { _ = fr.Close() })
				reg = fr
			case "dynamodb":
				db, table, c := countedTable(b)
				if err := capability.SeedDynamo(ctx, dynamolocal.Start(b).Client(), table, scaleCaps(n)); err != nil {
					b.Fatal(err)
				}
				reg, counters = capability.NewDynamoRegistry(db, table), append(counters, c)
			}
			procs[i] = newProc(b, reg, 0)
			// Discovery has loaded the index once, as a serving
			// process's would have: what an execution costs is then
			// what it does itself.
			if r := procs[i].run(`return (await tools.list()).filter((t) => t.kind === "capability").length`); !r.OK || string(r.Result) != fmt.Sprint(n+1) {
				b.Fatalf("tools.list: %s %+v", r.Result, r.Error)
			}
		}
		if store == "dynamodb" {
			// DynamoDB Local is a JVM: warm it, and let the bulk load's
			// collections pass.
			for range 1000 {
				procs[0].run(benchOneCall)
			}
			time.Sleep(2 * time.Second)
		}
		for _, sc := range []struct{ name, code, want string }{{"return_1", "return 1", "1"}, {"one_call", benchOneCall, "6"}} {
			b.Run(store+"/"+sc.name, func(b *testing.B) {
				req := execution.Request{Code: sc.code, TimeoutMS: 20000}
				for _, p := range procs {
					for range 20 {
						p.svc.Execute(ctx, req) // warm: instances, caches
					}
				}
				for _, c := range counters {
					c.take()
				}
				samples := make([][]time.Duration, len(procs))
				for b.Loop() {
					for i, p := range procs {
						start := time.Now()
						r := p.svc.Execute(ctx, req)
						samples[i] = append(samples[i], time.Since(start))
						if !r.OK || string(r.Result) != sc.want {
							b.Fatalf("%s %+v", r.Result, r.Error)
						}
					}
				}
				p50 := make([]float64, len(procs))
				for i, n := range scaleSizes {
					slices.Sort(samples[i])
					p50[i] = float64(samples[i][len(samples[i])/2].Microseconds()) / 1000
					b.ReportMetric(p50[i], fmt.Sprintf("p50-ms@%d", n))
				}
				b.ReportMetric(100*(p50[len(p50)-1]-p50[0])/p50[0], "growth-%")
				if len(counters) > 0 {
					total := 0
					for _, c := range counters {
						for _, v := range c.take() {
							total += v
						}
					}
					b.ReportMetric(float64(total)/float64(b.N*len(procs)), "ddb-req/exec")
				}
			})
		}
	}
}

const benchOneCall = "return await mcp.math.sum({xs: [1, 2, 3]})"

// BenchmarkNormalize measures what a save pays to compare its code with
// the name's versions (capability.Normalize: esbuild's parse and minified
// print), on a capability of about 1 KB.
func BenchmarkNormalize(b *testing.B) {
	code := strings.Repeat("// fetch and sum\nconst r = await mcp.demo.add({a: args.a, b: 2});\nif (r > 10) { return r / 2 } // halve\n", 10) + "return 0"
	b.SetBytes(int64(len(code)))
	for b.Loop() {
		capability.Normalize(code)
	}
}
