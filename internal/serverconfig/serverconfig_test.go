package serverconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/toolsource/lambda"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/toolsource/openapi"
)

// kinds are the standard kinds, as the app registers them.
var kinds = toolsource.NewRegistry(new(mcpkind.Kind), openapi.Kind{}, lambda.Kind{})

func TestParse(t *testing.T) {
	tests := []struct {
		name, file, doc string
		want            string // error text; "" for success
		mcp, oa, lam    int
	}{
		{name: "empty", file: "x.json", doc: ``},
		{name: "one of each", file: "servers.yaml", mcp: 1, oa: 1, lam: 1, doc: `
servers:
  - name: kv
    url: http://127.0.0.1:1/mcp
  - name: petstore
    type: openapi
    spec: https://petstore.test/openapi.json
    headers: {api_key: "${env:PETSTORE_KEY}"}
    read_only: [findPets*]
    require_approval: ["delete*"]
  - name: orders
    type: lambda
    allow_destructive: true
    functions:
      - name: get_order
        function: arn:aws:lambda:us-east-1:123456789012:function:get-order
        description: Get an order.
        read_only: true
        input_schema:
          type: object
          properties: {id: {type: integer}}
`},
		{name: "explicit mcp type, JSON", file: "s.json", mcp: 1,
			doc: `{"servers": [{"name": "kv", "type": "mcp", "url": "http://127.0.0.1:1/mcp"}]}`},
		{name: "unknown type", file: "s.json", want: `servers[0]: line 1: unknown type "grpc"`,
			doc: `{"servers": [{"name": "kv", "type": "grpc", "url": "http://127.0.0.1:1/mcp"}]}`},
		{name: "unknown openapi field", file: "s.json", want: "servers[1]: ",
			doc: `{"servers": [{"name": "kv", "url": "http://127.0.0.1:1/mcp"}, {"name": "p", "type": "openapi", "spec": "x.json", "allow_destructiv": true}]}`},
		{name: "an MCP error keeps its place in the list", file: "s.json", want: `servers[2]: line 1: server "then": server name`,
			doc: `{"servers": [{"name": "p", "type": "openapi", "spec": "x.json"}, {"name": "ok", "url": "http://127.0.0.1:1/mcp"}, {"name": "then", "url": "http://127.0.0.1:1/mcp"}]}`},
		{name: "unknown MCP field", file: "s.json", want: "colour",
			doc: `{"servers": [{"name": "kv", "url": "http://127.0.0.1:1/mcp", "colour": "red"}]}`},
		{name: "duplicate across kinds", file: "s.json", want: `duplicate server name "kv"`,
			doc: `{"servers": [{"name": "kv", "url": "http://127.0.0.1:1/mcp"}, {"name": "kv", "type": "openapi", "spec": "x.json"}]}`},
		{name: "openapi without spec", file: "s.yaml", want: "no spec",
			doc: "servers:\n  - {name: p, type: openapi}\n"},
		{name: "openapi spec of another scheme", file: "s.yaml", want: "want an http(s) URL or a file path",
			doc: "servers:\n  - {name: p, type: openapi, spec: \"file:///etc/passwd\"}\n"},
		{name: "lambda without functions", file: "s.yaml", want: "no functions",
			doc: "servers:\n  - {name: l, type: lambda}\n"},
		{name: "not a list of objects", file: "s.yaml", want: "not an object",
			doc: "servers:\n  - kv\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.file, []byte(tc.doc), kinds)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mcp, oa, lam := Of[mcpkind.Config](s), Of[openapi.Config](s), Of[lambda.Config](s)
			if len(mcp) != tc.mcp || len(oa) != tc.oa || len(lam) != tc.lam {
				t.Errorf("parsed %d MCP, %d OpenAPI, %d Lambda", len(mcp), len(oa), len(lam))
			}
		})
	}
	s, err := Parse("s.yaml", []byte(tests[1].doc), kinds)
	if err != nil {
		t.Fatal(err)
	}
	if f := Of[lambda.Config](s)[0].Functions[0]; !f.ReadOnly || !strings.Contains(string(f.InputSchema), `"integer"`) {
		t.Errorf("lambda function %+v", f)
	}
	if o := Of[openapi.Config](s)[0]; o.Headers["api_key"] != "${env:PETSTORE_KEY}" || o.ReadOnly[0] != "findPets*" {
		t.Errorf("openapi %+v", o)
	}
	if strings.Contains(Of[openapi.Config](s)[0].String(), "PETSTORE_KEY") {
		t.Errorf("String shows a header value: %s", Of[openapi.Config](s)[0])
	}
}

func TestMerge(t *testing.T) {
	a, err := Parse("a.json", []byte(`{"servers": [{"name": "x", "url": "http://127.0.0.1:1/mcp"}, {"name": "y", "type": "openapi", "spec": "y.json"}]}`), kinds)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b.json", []byte(`{"servers": [{"name": "x", "type": "openapi", "spec": "x.json"}]}`), kinds)
	if err != nil {
		t.Fatal(err)
	}
	a.Merge(b...)
	if len(Of[mcpkind.Config](a)) != 0 || len(Of[openapi.Config](a)) != 2 || strings.Join(a.Names(), ",") != "y,x" {
		t.Errorf("merged %v", a.Names())
	}
}

// TestLoadMCPConfig: MCP servers' entries, in YAML and in JSON, as
// their kind reads them (moved here from the MCP client with the parsing
// of the whole list).
func TestLoadMCPConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := []mcpkind.Config{
		{Config: toolsource.Config{Name: "github", Headers: map[string]string{"Authorization": "Bearer ${env:GITHUB_TOKEN}"}, CallTimeout: 10 * time.Second, Allow: []string{"get_*"}, Deny: []string{"get_secret"}}, URL: "https://api.example.com/mcp", Transport: "streamable", ConnectTimeout: 45 * time.Second},
		{Config: toolsource.Config{Name: "ev", AllowDestructive: true, RequireApproval: []string{"send_*", "pay"}}, URL: "http://127.0.0.1:9/sse", AssumeNotDestructive: true},
	}
	yamlBody := `servers:
  - name: github
    url: https://api.example.com/mcp
    transport: streamable
    headers:
      Authorization: "Bearer ${env:GITHUB_TOKEN}"
    call_timeout: 10s
    connect_timeout: 45s
    allow: ["get_*"]
    deny: [get_secret]
  - name: ev
    url: http://127.0.0.1:9/sse
    allow_destructive: true
    require_approval: ["send_*", pay]
    assume_not_destructive: true
`
	jsonBody := `{"servers":[
  {"name":"github","url":"https://api.example.com/mcp","transport":"streamable",
   "headers":{"Authorization":"Bearer ${env:GITHUB_TOKEN}"},"call_timeout":"10s","connect_timeout":"45s",
   "allow":["get_*"],"deny":["get_secret"]},
  {"name":"ev","url":"http://127.0.0.1:9/sse","allow_destructive":true,"require_approval":["send_*","pay"],"assume_not_destructive":true}]}`

	for _, f := range []string{write("servers.yaml", yamlBody), write("servers.json", jsonBody)} {
		s, err := Load(f, kinds)
		got := Of[mcpkind.Config](s)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n got %v\nwant %v", f, got, want)
		}
		if got[0].Headers["Authorization"] != "Bearer ${env:GITHUB_TOKEN}" {
			t.Errorf("header reference resolved at load time: %q", got[0].Headers["Authorization"])
		}
	}

	bad := []struct{ name, body, want string }{
		{"typo.yaml", "servers:\n  - name: a\n    url: http://h/mcp\n    allow_destructiv: true\n", "allow_destructiv"},
		{"typo.json", `{"servers":[{"name":"a","url":"http://h/mcp","allowDestructive":true}]}`, "allowDestructive"},
		{"dup.yaml", "servers:\n  - {name: a, url: http://h/mcp}\n  - {name: a, url: http://h/sse}\n", "duplicate"},
		{"proto.yaml", "servers:\n  - {name: __proto__, url: http://h/mcp}\n", "reserved"},
		{"then.yaml", "servers:\n  - {name: then, url: http://h/mcp}\n", "reserved"},
		{"timeout.yaml", "servers:\n  - {name: a, url: http://h/mcp, call_timeout: soon}\n", "call_timeout"},
		{"connect.yaml", "servers:\n  - {name: a, url: http://h/mcp, connect_timeout: soon}\n", "connect_timeout"},
		{"connect-negative.yaml", "servers:\n  - {name: a, url: http://h/mcp, connect_timeout: -1s}\n", "negative connect timeout"},
		{"relative-secret.yaml", "servers:\n  - name: a\n    url: http://h/mcp\n    headers: {X-Key: '${file:key.txt}'}\n", "absolute"},
		{"transport.yaml", "servers:\n  - {name: a, url: http://h/mcp, transport: ws}\n", "transport"},
		{"approval.yaml", "servers:\n  - {name: a, url: http://h/mcp, require_approval: [\"\"]}\n", "require_approval"},
		{"broken.json", `{"servers":[`, "broken.json"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			p := write(b.name, b.body)
			_, err := Load(p, kinds)
			if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("err %v; want one naming %s and %q", err, p, b.want)
			}
		})
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml"), kinds); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// TestErrorsSayWhere: a mistake in the server list is reported at the line
// of the key that holds it — in an entry of any kind, in its nested
// blocks (an MCP or OpenAPI server's auth, a Lambda server's functions),
// for a value of the wrong type and for one that does not validate — in
// the words of the document, never a Go type; nested blocks are as strict
// as the entry (an unknown key is an error, not ignored).
func TestErrorsSayWhere(t *testing.T) {
	goTypes := []string{"interface {}", "map[", "[]", "int64", "float64", "struct", "*", "toolsource.", "lambda.", "openapi.", "mcp.", "!!"}
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"mcp: a string for a bool", `
servers:
  - name: kv
    url: http://127.0.0.1:1/mcp
    allow_destructive: "yes please"
`, []string{"line 5", "true or false"}},
		{"mcp: a duration without a unit", `
servers:
  - name: kv
    url: http://127.0.0.1:1/mcp
    call_timeout: 5
`, []string{"line 5", "call_timeout"}},
		{"mcp: an unknown auth key", `
servers:
  - name: kv
    url: http://127.0.0.1:1/mcp
    auth:
      type: oauth
      scops: [read]
`, []string{"line 7", `unknown field "scops"`}},
		{"mcp: a string for auth's list", `
servers:
  - name: kv
    url: http://127.0.0.1:1/mcp
    auth:
      type: oauth
      scopes: read
`, []string{"line 7", "a list"}},
		{"mcp: a bad header name", `
servers:
  - name: kv
    url: http://127.0.0.1:1/mcp
    headers:
      "bad name": x
`, []string{"line 6", "header"}},
		{"openapi: an unknown auth key", `
servers:
  - name: pets
    type: openapi
    spec: https://pets.test/openapi.json
    auth:
      type: sigv4
      regon: us-east-1
`, []string{"line 8", `unknown field "regon"`}},
		{"openapi: a list for an object", `
servers:
  - name: pets
    type: openapi
    spec: https://pets.test/openapi.json
    query: [1, 2]
`, []string{"line 6", "an object"}},
		{"openapi: a bad fetch timeout", `
servers:
  - name: pets
    type: openapi
    spec: https://pets.test/openapi.json
    fetch_timeout: soon
`, []string{"line 6", "fetch_timeout"}},
		{"lambda: an unknown key in a function", `
servers:
  - name: fns
    type: lambda
    functions:
      - name: f1
        function: arn:aws:lambda:us-east-1:123456789012:function:f1
        input_schema: {type: object}
        read_onyl: true
`, []string{"line 9", `unknown field "read_onyl"`}},
		{"lambda: a list for a schema", `
servers:
  - name: fns
    type: lambda
    functions:
      - name: f1
        function: arn:aws:lambda:us-east-1:123456789012:function:f1
        input_schema: [1]
`, []string{"line 8", "an object"}},
		{"lambda: functions not a list", `
servers:
  - name: fns
    type: lambda
    functions:
      name: f1
`, []string{"line 6", "a list"}},
		{"lambda: a function that does not validate", `
servers:
  - name: fns
    type: lambda
    functions:
      - name: f1
        function: "not a function"
        input_schema: {type: object}
`, []string{"line 6", "f1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.doc), kinds)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q lacks %q", msg, w)
				}
			}
			for _, g := range goTypes {
				if strings.Contains(msg, g) {
					t.Errorf("%q shows %q", msg, g)
				}
			}
		})
	}
}
