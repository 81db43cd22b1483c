package openapi

import (
	"encoding/json"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/fault"
)

func parseFile(t *testing.T, name string, docURL *url.URL, base string) *Document {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(data, docURL, base)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return d
}

func byName(d *Document) map[string]*Operation {
	m := map[string]*Operation{}
	for _, op := range d.Operations {
		m[op.Tool.Name] = op
	}
	return m
}

// schemaMap decodes a schema for inspection.
func schemaMap(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("schema %s: %v", raw, err)
	}
	return m
}

// at follows a path of keys through decoded JSON.
func at(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func TestConvertShop(t *testing.T) {
	d := parseFile(t, "shop.yaml", nil, "")
	if got, want := d.Base.String(), "http://shop.test/api"; got != want {
		t.Errorf("base %s, want %s", got, want)
	}
	var names []string
	for _, op := range d.Operations {
		names = append(names, op.Tool.Name)
	}
	want := []string{"listOrders", "createOrder", "getOrder", "put_orders_id", "delete_orders_id", "patch_orders_id_lines_line"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("tools %v, want %v (drops %v)", names, want, d.Drops)
	}
	ops := byName(d)

	tests := []struct {
		tool       string
		method     string
		props      []string // in order
		required   []string
		readOnly   bool
		check      func(t *testing.T, in, out map[string]any)
		outputNone bool
	}{
		{tool: "listOrders", method: "GET", props: []string{"status", "limit", "X-Request-Id"}, readOnly: true,
			check: func(t *testing.T, in, out map[string]any) {
				limit := at(in, "properties", "limit")
				if at(limit, "exclusiveMaximum") != 100.0 || at(limit, "maximum") != nil || at(limit, "minimum") != 1.0 {
					t.Errorf("limit %v: want 3.0's boolean exclusiveMaximum as JSON Schema's number", limit)
				}
				if at(limit, "description") != "How many at most." {
					t.Errorf("limit has no description: %v", limit)
				}
				if at(out, "items", "$ref") != "#/$defs/Order" || at(out, "$defs", "Line") == nil {
					t.Errorf("output %v: want items of #/$defs/Order with every component it reaches", out)
				}
			}},
		{tool: "createOrder", method: "POST", props: []string{"body"}, required: []string{"body"},
			check: func(t *testing.T, in, out map[string]any) {
				if at(in, "properties", "body", "$ref") != "#/$defs/NewOrder" {
					t.Errorf("body %v", at(in, "properties", "body"))
				}
				note := at(in, "$defs", "NewOrder", "properties", "note")
				if !reflect.DeepEqual(at(note, "type"), []any{"string", "null"}) || at(note, "example") != nil {
					t.Errorf("note %v: want nullable as a type union, example dropped", note)
				}
				if at(in, "$defs", "NewOrder", "x-internal") != nil {
					t.Errorf("extension kept: %v", at(in, "$defs", "NewOrder"))
				}
				if at(in, "$defs", "Order") != nil {
					t.Errorf("input carries components it does not reach: %v", at(in, "$defs"))
				}
				// Order refers to itself: one definition, referenced.
				if at(out, "$defs", "Order", "allOf") == nil {
					t.Errorf("output %v", out)
				}
			}},
		{tool: "getOrder", method: "GET", props: []string{"path_id", "query_id", "session"}, required: []string{"path_id"}, readOnly: true,
			check: func(t *testing.T, in, out map[string]any) {
				if at(out, "$ref") != "#/$defs/Order" {
					t.Errorf("output %v: want the JSON media type's schema (not XML's)", out)
				}
			}},
		{tool: "put_orders_id", method: "PUT", props: []string{"id", "body"}, required: []string{"id"}},
		{tool: "delete_orders_id", method: "DELETE", props: []string{"id"}, required: []string{"id"},
			check: func(t *testing.T, in, out map[string]any) {
				if at(out, "type") != "null" {
					t.Errorf("204 without content: output %v, want null", out)
				}
			}},
		{tool: "patch_orders_id_lines_line", method: "PATCH", props: []string{"id", "line", "body"}, required: []string{"id", "line", "body"},
			check: func(t *testing.T, in, out map[string]any) {
				if at(in, "properties", "body", "type") != "string" || at(out, "type") != "string" {
					t.Errorf("text body %v, output %v", at(in, "properties", "body"), out)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.tool, func(t *testing.T) {
			op := ops[tc.tool]
			if op.Method != tc.method {
				t.Errorf("method %s, want %s", op.Method, tc.method)
			}
			in := schemaMap(t, op.Tool.InputSchema)
			if got := propOrder(t, op.Tool.InputSchema); !reflect.DeepEqual(got, tc.props) {
				t.Errorf("properties %v, want %v", got, tc.props)
			}
			var req []string
			for _, r := range asSlice(in["required"]) {
				req = append(req, r.(string))
			}
			if !reflect.DeepEqual(req, tc.required) {
				t.Errorf("required %v, want %v", req, tc.required)
			}
			if in["additionalProperties"] != false {
				t.Errorf("additionalProperties %v, want false", in["additionalProperties"])
			}
			a := op.Tool.Annotations
			if *a.ReadOnly != tc.readOnly || *a.Destructive == tc.readOnly || op.Tool.IsDestructive() == tc.readOnly {
				t.Errorf("annotations readOnly=%v destructive=%v, want read-only %v", *a.ReadOnly, *a.Destructive, tc.readOnly)
			}
			var out map[string]any
			if op.Tool.OutputSchema != nil {
				out = schemaMap(t, op.Tool.OutputSchema)
			}
			if tc.check != nil {
				tc.check(t, in, out)
			}
		})
	}
	if got := ops["listOrders"].Tool.Description; got != "List orders\n\nOrders, newest first." {
		t.Errorf("description %q", got)
	}
	if got := ops["listOrders"].Tool.Title; got != "List orders" {
		t.Errorf("title %q", got)
	}
	if got := ops["getOrder"].accept; got != "application/json, application/xml;q=0.8" {
		t.Errorf("accept %q", got)
	}
}

// propOrder lists an input schema's properties in the order written.
func propOrder(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, _ := dec.Token()
		if k != "properties" {
			if err := skipValue(dec); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var keys []string
		_, _ = dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			keys = append(keys, k.(string))
			if err := skipValue(dec); err != nil {
				t.Fatal(err)
			}
		}
		return keys
	}
	return nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func TestConvert31(t *testing.T) {
	d := parseFile(t, "trains31.json", &url.URL{Scheme: "https", Host: "trains.test", Path: "/openapi.json"}, "")
	if got := d.Base.String(); got != "https://trains.test/v2" {
		t.Errorf("base %s: want the relative server resolved against the document's URL", got)
	}
	op := byName(d)["get-trips"]
	if op == nil {
		t.Fatalf("no get-trips: %v %v", d.Operations, d.Drops)
	}
	in := schemaMap(t, op.Tool.InputSchema)
	if got := at(in, "properties", "when", "type"); !reflect.DeepEqual(got, []any{"string", "null"}) {
		t.Errorf("3.1 type array %v", got)
	}
	out := schemaMap(t, op.Tool.OutputSchema)
	if at(out, "$defs", "Trip", "properties", "price", "exclusiveMinimum") != 0.0 {
		t.Errorf("3.1 numeric exclusiveMinimum lost: %v", out)
	}
	if got := asSlice(at(out, "prefixItems")); len(got) != 1 {
		t.Errorf("prefixItems %v", at(out, "prefixItems"))
	}
	for _, p := range op.params {
		if p.name == "filter" && (p.style != "deepObject" || !p.explode) {
			t.Errorf("filter style %s explode %v", p.style, p.explode)
		}
	}
}

// TestArgumentsChecked: the input schema refuses what the service would,
// before any request.
func TestArgumentsChecked(t *testing.T) {
	ops := byName(parseFile(t, "shop.yaml", nil, ""))
	tests := []struct {
		tool, args string
		ok         bool
	}{
		{"listOrders", `{}`, true},
		{"listOrders", `{"status": ["open"], "limit": 5}`, true},
		{"listOrders", `{"limit": 100}`, false},
		{"listOrders", `{"limit": "5"}`, false},
		{"listOrders", `{"status": ["lost"]}`, false},
		{"listOrders", `{"stauts": ["open"]}`, false},
		{"createOrder", `{"body": {"items": [{"sku": "a", "qty": 1}], "note": null}}`, true},
		{"createOrder", `{"body": {"items": []}}`, false},
		{"createOrder", `{"body": {"items": [{"sku": "a", "qty": 0}]}}`, false},
		{"createOrder", `{}`, false},
		{"getOrder", `{"path_id": 3}`, true},
		{"getOrder", `{"path_id": 0}`, false},
		{"getOrder", `{"query_id": "x"}`, false},
	}
	for _, tc := range tests {
		// The Set checks arguments so, with the schema the tool lists.
		_, ferr := argcheck.New(ops[tc.tool].Tool.InputSchema).Check(json.RawMessage(tc.args))
		if (ferr == nil) != tc.ok {
			t.Errorf("%s(%s): err %v, want ok=%v", tc.tool, tc.args, ferr, tc.ok)
		}
		if ferr != nil && ferr.Code != fault.InvalidArguments {
			t.Errorf("%s(%s): %s, want INVALID_ARGUMENTS", tc.tool, tc.args, ferr.Code)
		}
	}
}

func TestDerivedNames(t *testing.T) {
	tests := []struct{ method, path, want string }{
		{"get", "/pets/{petId}/photos", "get_pets_petId_photos"},
		{"get", "/", "get"},
		{"post", "/v1/users.json", "post_v1_users_json"},
		{"delete", "/a--b//c", "delete_a_b_c"},
		{"get", "/" + strings.Repeat("x", 300), ""},
	}
	for _, tc := range tests {
		got := derivedName(tc.method, tc.path)
		if tc.want == "" {
			if len(got) > 128 || !strings.HasPrefix(got, "get_xxx") {
				t.Errorf("long path: %q", got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
	// Stable: the same document names the same way, and collisions get a
	// suffix in document order.
	doc := `{"openapi":"3.0.0","info":{"title":"t","version":"1"},"paths":{
	  "/a-b":{"get":{"responses":{"200":{"description":"ok"}}}},
	  "/a_b":{"get":{"responses":{"200":{"description":"ok"}}}},
	  "/c":{"get":{"operationId":"get_a_b","responses":{"200":{"description":"ok"}}}}}}`
	d, err := Parse([]byte(doc), nil, "http://x.test")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, op := range d.Operations {
		names = append(names, op.Tool.Name)
	}
	if want := []string{"get_a_b_2", "get_a_b_3", "get_a_b"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
}

// TestHeadersArgumentsCannotSet: header parameters that would let an
// argument set what HTTP, the credentials or tracing own are left out.
func TestHeadersArgumentsCannotSet(t *testing.T) {
	var params []string
	for _, h := range []string{"Host", "Content-Length", "Transfer-Encoding", "Cookie", "Authorization", "X-Amz-Date", "Traceparent", "X-Tenant"} {
		params = append(params, `{"name":"`+h+`","in":"header","schema":{"type":"string"}}`)
	}
	doc := docHead + `"paths":{"/x":{"get":{"parameters":[` + strings.Join(params, ",") + `],"responses":{"200":{"description":"ok"}}}}}}`
	d, err := Parse([]byte(doc), nil, "http://x.test")
	if err != nil {
		t.Fatal(err)
	}
	if got := propOrder(t, d.Operations[0].Tool.InputSchema); !reflect.DeepEqual(got, []string{"X-Tenant"}) {
		t.Errorf("header arguments %v, want only X-Tenant", got)
	}
}
