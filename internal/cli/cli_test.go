package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/cli"
	"github.com/pml-sandbox/pml/internal/demoserver"
)

type output struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code string `json:"code"`
	} `json:"error"`
	Calls []struct {
		Server, Tool string
		OK           bool
	} `json:"calls"`
	ExecutionID string  `json:"execution_id"`
	DurationMS  float64 `json:"duration_ms"`
}

func pml(t *testing.T, args ...string) (int, output, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if len(args) > 1 {
		args = append([]string{args[0], "--cache-dir", cacheDir}, args[1:]...)
	}
	code := cli.Main(context.Background(), args, &out, &errOut)
	var o output
	if out.Len() > 0 && strings.HasPrefix(strings.TrimSpace(out.String()), "{") {
		if err := json.Unmarshal(out.Bytes(), &o); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
		}
	}
	return code, o, errOut.String()
}

var cacheDir = filepath.Join(os.TempDir(), "pml-cli-test-cache")

// TestMain keeps the commands' traces and capabilities out of the user's
// data directory.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pml-cli-test")
	if err != nil {
		panic(err)
	}
	os.Setenv("PML_TRACES_FILE", filepath.Join(dir, "traces.jsonl"))
	os.Setenv("PML_CAPABILITIES_FILE", filepath.Join(dir, "capabilities.json"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestRun(t *testing.T) {
	script := filepath.Join(t.TempDir(), "s.js")
	if err := os.WriteFile(script, []byte("return args.n * 2"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		exit   int
		result string
		code   string
		calls  int
	}{
		{"issue example", []string{"run", "-e", "return await Promise.all([mcp.demo.echo({x:1}), mcp.demo.add({a:2,b:3})])"}, 0, `[{"x":1},5]`, "", 2},
		{"file with args", []string{"run", "--args", `{"n": 21}`, script}, 0, `42`, "", 0},
		{"script error exits 1", []string{"run", "-e", "throw new Error('x')"}, 1, "", "SCRIPT_ERROR", 0},
		{"tool error exits 1", []string{"run", "-e", "await mcp.demo.fail({})"}, 1, "", "TOOL_ERROR", 1},
		{"timeout exits 1", []string{"run", "--timeout", "100ms", "-e", "while (true) {}"}, 1, "", "TIMEOUT", 0},
		{"narrowed tool set", []string{"run", "--tools", "demo:echo", "-e", "return await mcp.demo.add({a:1,b:2})"}, 1, "", "TOOL_NOT_FOUND", 0},
		{"nothing to run", []string{"run"}, 2, "", "", 0},
		{"both -e and file", []string{"run", "-e", "1", script}, 2, "", "", 0},
		{"bad args JSON", []string{"run", "--args", "{", "-e", "return 1"}, 2, "", "", 0},
		{"missing file", []string{"run", "/nonexistent.js"}, 2, "", "", 0},
		{"unknown flag", []string{"run", "--nope", "-e", "1"}, 2, "", "", 0},
		{"unknown command", []string{"frobnicate"}, 2, "", "", 0},
		{"bad --mcp", []string{"run", "--mcp", "noequals", "-e", "return 1"}, 2, "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exit, o, stderr := pml(t, tt.args...)
			if exit != tt.exit {
				t.Fatalf("exit %d, want %d; stderr: %s", exit, tt.exit, stderr)
			}
			if tt.result != "" {
				var g, w any
				_ = json.Unmarshal(o.Result, &g)
				_ = json.Unmarshal([]byte(tt.result), &w)
				gb, _ := json.Marshal(g)
				wb, _ := json.Marshal(w)
				if !o.OK || string(gb) != string(wb) {
					t.Fatalf("result %s, want %s", o.Result, tt.result)
				}
				if o.ExecutionID == "" || o.DurationMS <= 0 {
					t.Fatalf("missing execution id or duration: %+v", o)
				}
			}
			if tt.code != "" && (o.Error == nil || o.Error.Code != tt.code) {
				t.Fatalf("error %+v, want %s", o.Error, tt.code)
			}
			if tt.exit != 2 && len(o.Calls) != tt.calls {
				t.Fatalf("calls %+v, want %d", o.Calls, tt.calls)
			}
			if tt.exit == 2 && stderr == "" {
				t.Fatal("a usage error must say what is wrong on stderr")
			}
		})
	}
}

func TestCapabilityAndTraceCommands(t *testing.T) {
	script := filepath.Join(t.TempDir(), "sum.js")
	if err := os.WriteFile(script, []byte("return args.xs.reduce((a, b) => a + b, 0)"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := cli.Main(context.Background(), []string{"capability", "save", "math:sum", script, "--description", "sum"}, &out, &errOut); code != 0 {
		t.Fatalf("save: %d %s", code, errOut.String())
	}
	exit, o, stderr := pml(t, "run", "-e", "return await mcp.math.sum({xs: [1, 2, 3]})")
	if exit != 0 || string(o.Result) != "6" || len(o.Calls) != 1 {
		t.Fatalf("run: %d %+v %s", exit, o, stderr)
	}
	out.Reset()
	if code := cli.Main(context.Background(), []string{"trace", o.ExecutionID}, &out, &errOut); code != 0 || !strings.Contains(out.String(), `"tool": "sum"`) {
		t.Fatalf("trace: %d %s %s", code, out.String(), errOut.String())
	}
	if code := cli.Main(context.Background(), []string{"trace", "ex_nope"}, &out, &errOut); code != 2 {
		t.Fatalf("trace of an unknown id exits %d", code)
	}
	if code := cli.Main(context.Background(), []string{"capability", "save", "bad", script}, &out, &errOut); code != 2 {
		t.Fatalf("saving a bad name exits %d", code)
	}
}

func TestRunAgainstMCPServer(t *testing.T) {
	ds, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	for _, url := range []string{ds.SSEURL(), ds.StreamableURL()} {
		exit, o, stderr := pml(t, "run", "--mcp", "demo="+url, "-e", "return (await mcp.demo.word_count({text: 'a b c'})).words")
		if exit != 0 || string(o.Result) != "3" || len(o.Calls) != 1 || !o.Calls[0].OK || o.Calls[0].Server != "demo" {
			t.Fatalf("%s: exit %d, %+v, %s", url, exit, o, stderr)
		}
	}
	var out, errOut bytes.Buffer
	if code := cli.Main(context.Background(), []string{"tools", "--mcp", "demo=" + ds.StreamableURL(), "--dts"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "word_count(args: {") {
		t.Fatalf("pml tools --dts: %d %s %s", code, out.String(), errOut.String())
	}
}
