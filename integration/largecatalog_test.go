package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
	"github.com/pml-sandbox/pml/internal/testutil/octokit"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
	"github.com/pml-sandbox/pml/internal/toolsource/openapi"
)

// githubServers is a server list of GitHub's REST document (1,222
// operations), its requests sent to api.github.com (the document's
// uploads.github.com operations are then on the configured base).
func githubServers(t testing.TB) string {
	t.Helper()
	doc := octokit.Document(t)
	return fmt.Sprintf("servers:\n  - name: gh\n    type: openapi\n    spec: %q\n    base_url: https://api.github.com\n", doc)
}

// cacheOutcome is what the run's "openapi service loaded" line says the
// cache did.
func cacheOutcome(t *testing.T, logs string) string {
	t.Helper()
	for line := range strings.Lines(logs) {
		if !strings.Contains(line, `"openapi service loaded"`) {
			continue
		}
		_, rest, ok := strings.Cut(line, `"cache":"`)
		if !ok {
			t.Fatalf("no cache outcome in %s", line)
		}
		outcome, _, _ := strings.Cut(rest, `"`)
		return outcome
	}
	t.Fatalf("the document was not loaded:\n%s", logs)
	return ""
}

// TestLargeCatalogCached: pml run with GitHub's document configured parses
// it once; the next run reads it back from the cache beside the compiled
// guest's (the entry untouched) with the same tools; a damaged entry is
// not used (parsed again, and written anew); a cache directory that cannot
// be written costs only the parse.
func TestLargeCatalogCached(t *testing.T) {
	servers := filepath.Join(t.TempDir(), "servers.yaml")
	if err := os.WriteFile(servers, []byte(githubServers(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	guestCache := filepath.Join(t.TempDir(), "wazero")
	entries := openapi.CacheDir(guestCache)
	run := func(cacheDir, code string) (string, string) {
		t.Helper()
		cmd := exec.Command(bins.pml, "run", "--config", servers, "--cache-dir", cacheDir, "-e", code)
		cmd.Env = pmlEnv(t, app.EnvLogLevel+"=info")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("pml run: %v\n%s\n%s", err, out.String(), errOut.String())
		}
		return out.String(), cacheOutcome(t, errOut.String())
	}
	entry := func() (string, []byte) {
		t.Helper()
		// Entries are *.doc; beside them *.stat records say a file's
		// digest without reading it.
		docs, err := filepath.Glob(filepath.Join(entries, "*.doc"))
		if err != nil || len(docs) != 1 {
			t.Fatalf("the cache holds %v (%v), want one entry", docs, err)
		}
		p := docs[0]
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return p, b
	}
	// What the script sees of the catalog: the count and one tool's
	// endpoint, the same whether parsed or read back.
	const probe = `const l = await tools.list(); const t = l.find(t => t.name === "repos/get"); return [l.length, t && t.call]`

	out1, first := run(guestCache, probe)
	path, written := entry()
	out2, second := run(guestCache, probe)
	if first != "miss" || second != "hit" {
		t.Fatalf("cache outcomes %q then %q, want miss then hit", first, second)
	}
	if _, again := entry(); !bytes.Equal(again, written) {
		t.Fatal("the second run rewrote the entry")
	}
	if r1, r2 := resultOf(t, out1), resultOf(t, out2); r1 != r2 || !strings.HasPrefix(r1, "[1222,") || !strings.Contains(r1, "repos/get") {
		t.Fatalf("catalog parsed %s, read back %s", r1, r2)
	}

	// A damaged entry: parsed again and written anew.
	damaged := bytes.Clone(written)
	damaged[len(damaged)/2] ^= 1
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, got := run(guestCache, "return 1+1"); got != "miss" {
		t.Fatalf("damaged entry: outcome %q", got)
	}
	if _, again := entry(); !bytes.Equal(again, written) {
		t.Fatal("the damaged entry was not written anew")
	}
	if _, got := run(guestCache, "return 1+1"); got != "hit" {
		t.Fatalf("after rewriting: outcome %q", got)
	}

	// Where the cache cannot be written (a file stands in the directory's
	// place, as a read-only artifact would): every run parses, and runs.
	ro := filepath.Join(t.TempDir(), "wazero")
	if err := os.WriteFile(openapi.CacheDir(ro), nil, 0o400); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if out, got := run(ro, "return 1+1"); got != "miss" || resultOf(t, out) != "2" {
			t.Fatalf("unwritable cache: outcome %q, %s", got, out)
		}
	}
}

// resultOf is the compact JSON result of pml run's answer.
func resultOf(t *testing.T, out string) string {
	t.Helper()
	_, rest, ok := strings.Cut(out, `"result": `)
	if !ok {
		t.Fatalf("no result in %s", out)
	}
	end := strings.Index(rest, ",\n  \"")
	if end < 0 {
		t.Fatalf("no result in %s", out)
	}
	return strings.Join(strings.Fields(rest[:end]), "")
}

// TestLargeCatalogColdContainer: the execute function's container start
// with GitHub's document configured parses it once per cache directory
// (/tmp/pml-cache on Lambda): a later process that finds the entry reads
// it back, and so does a new container whose artifact ships the entry
// beside its guest cache.
func TestLargeCatalogColdContainer(t *testing.T) {
	servers := githubServers(t)
	cacheDir := filepath.Join(t.TempDir(), "pml-cache")
	start := func(cacheDir, shipped string) string {
		t.Helper()
		logs := &syncbuf.Buffer{}
		emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bins.execute, Stderr: logs,
			Env: []string{app.EnvCompileCache + "=" + cacheDir, app.EnvShippedCache + "=" + shipped, app.EnvLogLevel + "=info",
				app.EnvCapFile + "=" + filepath.Join(t.TempDir(), "caps.json"), app.EnvMCPServers + "=" + servers}})
		if err != nil {
			t.Fatal(err)
		}
		defer emu.Close()
		out, _, err := emu.Invoke(context.Background(), "execute", []byte(`{"code": "return 1+1"}`))
		if err != nil || !bytes.Contains(out, []byte(`"result":2`)) {
			t.Fatalf("invoke: %v %s\n%s", err, out, logs.String())
		}
		return cacheOutcome(t, logs.String())
	}
	if first, second := start(cacheDir, "off"), start(cacheDir, "off"); first != "miss" || second != "hit" {
		t.Fatalf("container starts: cache %q then %q, want miss then hit", first, second)
	}
	// A new container (an empty /tmp) whose artifact ships the entry
	// beside its guest cache, as a build that knows the document would
	// pre-warm it: read back, not parsed.
	if got := start(filepath.Join(t.TempDir(), "pml-cache"), cacheDir); got != "hit" {
		t.Fatalf("a new container with the entry shipped: cache %q, want hit", got)
	}
}

// BenchmarkLargeCatalogContainer: a new execute-function container's start
// and first response (a warm compiled guest in its cache directory), with
// no server ("none"), with GitHub's document parsed at the start ("parse":
// no entry anywhere, as before the cache), and with its entry shipped
// beside the guest cache ("shipped"), as medians of wall time and of the
// process's CPU time. The cases take turns in each iteration, so that the
// load of a shared machine weighs on them alike.
//
//	go test -run '^$' -bench LargeCatalogContainer -benchtime 3x ./integration/
func BenchmarkLargeCatalogContainer(b *testing.B) {
	servers := githubServers(b)
	warm := filepath.Join(b.TempDir(), "pml-cache")
	// The process's own entries cannot be written (a file stands where
	// their directory would be): every start without a shipped entry
	// parses, as a new container does.
	if err := os.WriteFile(openapi.CacheDir(warm), nil, 0o400); err != nil {
		b.Fatal(err)
	}
	shipped := filepath.Join(b.TempDir(), "guest-cache")
	empty := filepath.Join(b.TempDir(), "no-guest-cache")
	start := func(cacheDir, shippedDir, servers string) (time.Duration, time.Duration) {
		env := []string{app.EnvCompileCache + "=" + cacheDir, app.EnvShippedCache + "=" + shippedDir, app.EnvLogLevel + "=error",
			app.EnvCapFile + "=" + filepath.Join(b.TempDir(), "caps.json")}
		if servers != "" {
			env = append(env, app.EnvMCPServers+"="+servers)
		}
		emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bins.execute, Stderr: io.Discard, Env: env})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		out, fnErr, err := emu.Invoke(context.Background(), "execute", []byte(`{"code": "return 1+1"}`))
		took := time.Since(t0)
		emu.Close()
		if err != nil || fnErr || !bytes.Contains(out, []byte(`"result":2`)) {
			b.Fatalf("%s %v %v", out, fnErr, err)
		}
		return took, emu.CPUTime()
	}
	// The shipped entry: what a start with a writable cache writes,
	// moved beside the shipped guest cache. The warm guest cache too.
	scratch := filepath.Join(b.TempDir(), "pml-cache")
	start(scratch, "off", servers)
	if err := os.Rename(openapi.CacheDir(scratch), openapi.CacheDir(shipped)); err != nil {
		b.Fatal(err)
	}
	start(warm, "off", "")
	cases := []struct {
		name, shipped, servers string
	}{
		{"none", empty, ""},
		{"parse", empty, servers},
		{"shipped", shipped, servers},
	}
	took := make([][]time.Duration, len(cases))
	cpu := make([][]time.Duration, len(cases))
	for b.Loop() {
		for i, c := range cases {
			w, u := start(warm, c.shipped, c.servers)
			took[i], cpu[i] = append(took[i], w), append(cpu[i], u)
		}
	}
	for i, c := range cases {
		b.ReportMetric(medianMS(took[i]), c.name+"-ms/first-response")
		b.ReportMetric(medianMS(cpu[i]), c.name+"-cpu-ms")
	}
	b.ReportMetric(0, "ns/op")
}
