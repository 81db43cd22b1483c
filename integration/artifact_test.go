package integration

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/guestcache"
	"github.com/pml-sandbox/pml/internal/testutil/ddbstream"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// TestArtifact checks the Lambda artifacts `make build` wrote under
// $PML_ARTIFACTS (`make check-artifact` sets it): both functions' bootstraps
// run as Lambda runs them, behind the emulator, each from an empty /tmp —
// under qemu-user with Graviton2's CPU model when they are built for
// another architecture than this machine's — and each must answer its first
// request without compiling the guest: its one guest_cache line says hit,
// from the shipped cache, and nothing was compiled into its cache
// directory. Under a CPU model without the LSE atomics the same artifact
// must log a miss that names them. The aggregator's artifact, which runs
// no sandbox, ships no guest and must count a stream batch.
func TestArtifact(t *testing.T) {
	dist := os.Getenv("PML_ARTIFACTS")
	if dist == "" {
		t.Skip("PML_ARTIFACTS is unset; run `make build && make check-artifact`")
	}
	execute := filepath.Join(dist, "ExecuteFunction")
	capability := filepath.Join(dist, "CapabilityFunction")
	for _, dir := range []string{execute, capability} {
		if _, err := guestcache.ReadManifest(filepath.Join(dir, app.ShippedCacheName)); err != nil {
			t.Fatalf("%s ships no compiled guest (built with PML_SHIP_CACHE=0?): %v", dir, err)
		}
	}
	wrapper := artifactWrapper(t, filepath.Join(execute, "bootstrap"), "neoverse-n1")

	t.Run("both functions, first requests", func(t *testing.T) {
		logs := &lineLog{t: t}
		capsFile := filepath.Join(t.TempDir(), "caps.json")
		var caches []string
		env := func() []string {
			tmp := t.TempDir() // the container's empty /tmp
			caches = append(caches, filepath.Join(tmp, "pml-cache"))
			return []string{"TMPDIR=" + tmp, app.EnvCompileCache + "=" + filepath.Join(tmp, "pml-cache"),
				app.EnvDemoTools + "=on", app.EnvLogLevel + "=info", app.EnvCapFile + "=" + capsFile,
				app.EnvCapFunction + "=capability", app.EnvApprovers + "=" + approversEnv,
				"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local"}
		}
		// One process each, so each has one cache directory to inspect.
		emu, err := lambdaemu.Start(
			lambdaemu.Function{Name: "execute", Binary: filepath.Join(execute, "bootstrap"), Wrapper: wrapper, Env: env(),
				Timeout: 2 * time.Minute, MaxConcurrency: 1, Stderr: logs},
			lambdaemu.Function{Name: "capability", Binary: filepath.Join(capability, "bootstrap"), Wrapper: wrapper, Env: env(),
				Timeout: 2 * time.Minute, MaxConcurrency: 1, Stderr: logs},
		)
		if err != nil {
			t.Fatal(err)
		}
		emu.SetEnv("AWS_ENDPOINT_URL_LAMBDA=" + emu.Endpoint())
		defer emu.Close()
		ctx := context.Background()

		start := time.Now()
		if got := invokeResult(t, emu, "execute", `{"code": "return await mcp.demo.add({a: 1, b: 1})"}`); got != "2" {
			t.Fatalf("execute answered %s, want 2", got)
		}
		t.Logf("execute: first response %v after process start", time.Since(start).Round(time.Millisecond))

		save, _ := json.Marshal(approverEvent("POST", "/capabilities", `{"name": "math:dbl", "code": "return args.x * 2"}`))
		if out, fnErr, err := emu.Invoke(ctx, "execute", save); err != nil || fnErr || !bytes.Contains(out, []byte(`"statusCode":201`)) {
			t.Fatalf("saving a capability: %s %v %v", out, fnErr, err)
		}
		// The capability function's first request, through the execute one.
		start = time.Now()
		if got := invokeResult(t, emu, "execute", `{"code": "return await mcp.math.dbl({x: 21})"}`); got != "42" {
			t.Fatalf("the capability answered %s, want 42", got)
		}
		t.Logf("capability: first response %v after process start", time.Since(start).Round(time.Millisecond))

		lines := logs.guestCache(t)
		if len(lines) != 2 {
			t.Fatalf("want one guest_cache line from each function, got %d: %v", len(lines), lines)
		}
		for _, l := range lines {
			if l["hit"] != true || l["from"] != "shipped" {
				t.Errorf("a function compiled the guest: %v", l)
			}
		}
		for _, dir := range caches {
			if entries, err := guestcache.Entries(dir); err != nil || len(entries) == 0 {
				t.Fatalf("cache directory %s: %v %v", dir, entries, err)
			}
			if n := compiledInto(t, dir); n != 0 {
				t.Errorf("%s: %d entries compiled, not linked to the shipped cache", dir, n)
			}
		}
	})

	t.Run("the aggregator, no guest, counts a stream batch", func(t *testing.T) {
		testAggregateArtifact(t, filepath.Join(dist, "AggregateFunction"), wrapper)
	})

	if len(wrapper) == 0 {
		return // natively, the CPU is what it is
	}
	t.Run("a CPU without LSE atomics misses visibly", func(t *testing.T) {
		logs := &lineLog{t: t}
		tmp := t.TempDir()
		emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: filepath.Join(execute, "bootstrap"),
			Wrapper: artifactWrapper(t, filepath.Join(execute, "bootstrap"), "cortex-a72"), Timeout: 2 * time.Minute, Stderr: logs,
			Env: []string{"TMPDIR=" + tmp, app.EnvCompileCache + "=" + filepath.Join(tmp, "pml-cache"), app.EnvDemoTools + "=on",
				app.EnvLogLevel + "=info", app.EnvCapFile + "=" + filepath.Join(tmp, "caps.json")}})
		if err != nil {
			t.Fatal(err)
		}
		defer emu.Close()
		if got := invokeResult(t, emu, "execute", `{"code": "return 6 * 7"}`); got != "42" {
			t.Fatalf("execute answered %s", got)
		}
		lines := logs.guestCache(t)
		if len(lines) != 1 || lines[0]["hit"] != false || !strings.Contains(lines[0]["reason"].(string), guestcache.FeatureArm64Atomics) {
			t.Fatalf("want one miss naming %s, got %v", guestcache.FeatureArm64Atomics, lines)
		}
	})
}

// testAggregateArtifact runs the aggregate artifact in dir (under wrapper)
// behind the emulator against DynamoDB Local: it ships no guest, and it
// counts a batch of the traces table's real stream records once, however
// often the batch is delivered.
func testAggregateArtifact(t *testing.T, dir string, wrapper []string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "bootstrap" {
		t.Fatalf("%s holds %v; want the bootstrap alone (the aggregator runs no sandbox)", dir, entries)
	}
	ctx := context.Background()
	db := dynamolocal.Start(t)
	table := dynamolocal.TableName(t)
	if err := tracedb.CreateTable(ctx, db.Client(), table); err != nil {
		t.Fatal(err)
	}
	store := tracedb.NewDynamo(db.Client(), table, 0, nil)
	for _, id := range []string{"ex_a1", "ex_a2"} {
		var calls []trace.Call
		for i, tool := range []string{"kv_get", "kv_set"} {
			calls = append(calls, trace.Call{ExecutionID: id, CallID: i + 1, Server: "kv", Tool: tool, Kind: trace.KindMCP, StartedAt: time.Now(), OK: true})
		}
		store.Record(ctx, trace.Execution{ID: id, CodeHash: "h", Status: trace.StatusOK, StartedAt: time.Now(), Source: "test", Calls: 2}, calls)
	}
	if err := store.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stream, err := ddbstream.Open(ctx, db, table)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := stream.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var metas []events.DynamoDBEventRecord // what the mapping's filter passes
	for _, r := range recs {
		if r.Change.Keys["sk"].String() == "META" {
			metas = append(metas, r)
		}
	}
	payload, _ := json.Marshal(events.DynamoDBEvent{Records: metas})
	logs := &lineLog{t: t}
	emu, err := lambdaemu.Start(lambdaemu.Function{Name: "aggregate", Binary: filepath.Join(dir, "bootstrap"), Wrapper: wrapper,
		Timeout: 2 * time.Minute, MaxConcurrency: 1, Stderr: logs,
		Env: []string{"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
			"AWS_ENDPOINT_URL_DYNAMODB=" + db.Endpoint, "AWS_RESPONSE_CHECKSUM_VALIDATION=when_required",
			app.EnvTracesTable + "=" + table, "PML_AGGREGATE_TRANSACT_ITEMS=10", app.EnvLogLevel + "=info"}})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	for range 2 { // a retried batch counts once
		if out, fnErr, err := emu.Invoke(ctx, "aggregate", payload); err != nil || fnErr {
			t.Fatalf("aggregate: %s %v %v", out, fnErr, err)
		}
	}
	rel, err := store.RelatedTools(ctx, "kv:kv_get", 0)
	if err != nil || fmt.Sprint(rel) != "[{kv:kv_set 2}]" {
		t.Fatalf("related to kv:kv_get: %v %v", rel, err)
	}
}

// artifactWrapper is the command line that runs bin as Lambda would: none
// when it is built for this machine, else qemu-user with the given CPU
// model.
func artifactWrapper(t *testing.T, bin, cpu string) []string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	arch := map[elf.Machine]string{elf.EM_AARCH64: "arm64", elf.EM_X86_64: "amd64"}[f.Machine]
	if arch == runtime.GOARCH {
		return nil
	}
	if arch != "arm64" {
		t.Fatalf("%s is built for %v; only arm64 artifacts run under qemu here", bin, f.Machine)
	}
	for _, name := range []string{"qemu-aarch64-static", "qemu-aarch64"} {
		if qemu, err := exec.LookPath(name); err == nil {
			return []string{qemu, "-cpu", cpu}
		}
	}
	t.Fatal("running the arm64 artifact here needs qemu-aarch64-static (Debian's qemu-user-static package); `make build` installs it")
	return nil
}

// invokeResult invokes fn with a direct-invocation payload and returns the
// execution's result, failing the test unless it succeeded.
func invokeResult(t *testing.T, emu *lambdaemu.Emulator, fn, payload string) string {
	t.Helper()
	out, fnErr, err := emu.Invoke(context.Background(), fn, []byte(payload))
	if err != nil || fnErr {
		t.Fatalf("invoke %s: %s %v %v", fn, out, fnErr, err)
	}
	var r execution.Response
	if err := json.Unmarshal(out, &r); err != nil || !r.OK {
		t.Fatalf("invoke %s: %s", fn, out)
	}
	return string(r.Result)
}

// lineLog collects the functions' log lines, and shows them in the test
// log.
type lineLog struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			l.lines = append(l.lines, line)
			l.t.Log(line)
		}
	}
	return len(p), nil
}

// guestCache returns the guest_cache lines logged so far, decoded.
func (l *lineLog) guestCache(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range l.lines {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "guest_cache" {
			out = append(out, m)
		}
	}
	return out
}
