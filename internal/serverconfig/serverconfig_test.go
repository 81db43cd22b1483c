package serverconfig

import (
	"strings"
	"testing"
)

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
		{name: "unknown type", file: "s.json", want: `servers[0]: unknown type "grpc"`,
			doc: `{"servers": [{"name": "kv", "type": "grpc", "url": "http://127.0.0.1:1/mcp"}]}`},
		{name: "unknown openapi field", file: "s.json", want: "servers[1]: ",
			doc: `{"servers": [{"name": "kv", "url": "http://127.0.0.1:1/mcp"}, {"name": "p", "type": "openapi", "spec": "x.json", "allow_destructiv": true}]}`},
		{name: "an MCP error keeps its place in the list", file: "s.json", want: "servers[2]: server name",
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
			s, err := Parse(tc.file, []byte(tc.doc))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.MCP) != tc.mcp || len(s.OpenAPI) != tc.oa || len(s.Lambda) != tc.lam {
				t.Errorf("parsed %d MCP, %d OpenAPI, %d Lambda", len(s.MCP), len(s.OpenAPI), len(s.Lambda))
			}
		})
	}
	s, err := Parse("s.yaml", []byte(tests[1].doc))
	if err != nil {
		t.Fatal(err)
	}
	if f := s.Lambda[0].Functions[0]; !f.ReadOnly || !strings.Contains(string(f.InputSchema), `"integer"`) {
		t.Errorf("lambda function %+v", f)
	}
	if o := s.OpenAPI[0]; o.Headers["api_key"] != "${env:PETSTORE_KEY}" || o.ReadOnly[0] != "findPets*" {
		t.Errorf("openapi %+v", o)
	}
	if strings.Contains(s.OpenAPI[0].String(), "PETSTORE_KEY") {
		t.Errorf("String shows a header value: %s", s.OpenAPI[0])
	}
}

func TestMerge(t *testing.T) {
	a, err := Parse("a.json", []byte(`{"servers": [{"name": "x", "url": "http://127.0.0.1:1/mcp"}, {"name": "y", "type": "openapi", "spec": "y.json"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b.json", []byte(`{"servers": [{"name": "x", "type": "openapi", "spec": "x.json"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a.Merge(b)
	if len(a.MCP) != 0 || len(a.OpenAPI) != 2 || strings.Join(a.Names(), ",") != "y,x" {
		t.Errorf("merged %v", a.Names())
	}
}
