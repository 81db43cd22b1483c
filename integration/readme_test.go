package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/testutil/tsc"
)

// readmeScripts returns the README's scripts: every ```ts block, and every
// `pml run -e '…'` of its shell examples.
func readmeScripts(t *testing.T) (ts, runs []string) {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```(ts|sh)\n(.*?)```")
	run := regexp.MustCompile(`pml run .*?-e '([^']*)'`)
	for _, m := range block.FindAllStringSubmatch(string(raw), -1) {
		if m[1] == "ts" {
			ts = append(ts, m[2])
			continue
		}
		for _, r := range run.FindAllStringSubmatch(m[2], -1) {
			runs = append(runs, r[1])
		}
	}
	if len(ts) == 0 || len(runs) < 5 {
		t.Fatalf("found %d ts blocks and %d pml run -e examples in the README", len(ts), len(runs))
	}
	return ts, runs
}

// TestREADMEScriptsTypeCheck type-checks the README's scripts, as an agent
// would, against the declarations pml serve hands out (GET
// /tools?format=dts) for the servers the README configures (demo, and kv as
// in its demo-server example), with the capability it saves; and runs its
// TypeScript blocks.
func TestREADMEScriptsTypeCheck(t *testing.T) {
	compiler := tsc.Path(t)
	ts, runs := readmeScripts(t)
	srv := startServe(t, nil, "--mcp", "demo="+demoServer(t), "--mcp", "kv="+demoServer(t))
	sum, err := os.ReadFile("../examples/sum.js")
	if err != nil {
		t.Fatal(err)
	}
	save, _ := json.Marshal(map[string]string{"name": "math:sum", "code": string(sum)})
	resp, err := http.Post(srv.base+"/capabilities", "application/json", strings.NewReader(string(save)))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("saving math:sum: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.base + "/tools?format=dts")
	if err != nil {
		t.Fatal(err)
	}
	dts, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(dts), "kv_get") || !strings.Contains(string(dts), "math: {") {
		t.Fatalf("declarations without the README's servers:\n%s", dts)
	}

	dir := t.TempDir()
	for i, body := range append(ts, runs...) {
		// Each script is the body of an async function, as the sandbox
		// runs it; one file each, since the globals would clash.
		file := filepath.Join(dir, "script"+strconv.Itoa(i)+".ts")
		src := string(dts) + "\nasync function main() {\n" + body + "\n}\n"
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := tsc.Check(compiler, file); err != nil {
			t.Errorf("the README's script does not type-check against /tools?format=dts: %v\n%s\n--- script ---\n%s", err, out, body)
		}
	}

	for _, body := range ts {
		req, _ := json.Marshal(map[string]string{"code": body, "lang": "ts"})
		resp, err := http.Post(srv.base+"/execute", "application/json", strings.NewReader(string(req)))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("the README's TypeScript does not run: %d %s\n--- script ---\n%s", resp.StatusCode, out, body)
		}
	}
}
