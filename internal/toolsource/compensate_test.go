package toolsource_test

import (
	"context"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestCompensateDecoded: the compensate block is read strictly — every
// key, every reference — and a compensation that would reach a tool the
// configuration hides is refused at load.
func TestCompensateDecoded(t *testing.T) {
	k := &fakeKind{}
	for _, c := range []struct {
		name, doc, want string
	}{
		{"create and delete, set and restore", `name: shop
tools: [create_order, cancel_order, kv_set]
compensate:
  create_order: {tool: cancel_order, args: {order_id: "$.result.id"}}
  kv_set: {tool: kv_set, args: {key: "$.args.key", value: "$.result.previous"}}
`, ""},
		{"a typo in a compensation", "name: shop\ncompensate:\n  create_order: {tool: cancel_order, arg: {}}\n", `line 3: unknown field "arg"`},
		{"a tool that is not a name", "name: shop\ncompensate:\n  create_order: {tool: [a]}\n", "want the undoing tool's name"},
		{"no tool", "name: shop\ncompensate:\n  create_order: {args: {}}\n", "needs the tool"},
		{"a reference to something else", "name: shop\ncompensate:\n  create_order: {tool: cancel, args: {id: \"$.env.SECRET\"}}\n", "only args and result"},
		{"another server's tool", "name: shop\ncompensate:\n  create_order: {tool: \"bank:refund\"}\n", "contains ':'"},
		{"args that are not an object", "name: shop\ncompensate:\n  create_order: {tool: cancel, args: [1]}\n", "must be an object"},
		{"not an object", "name: shop\ncompensate: [create_order]\n", "want an object"},
		{"an undo the deny list hides", "name: shop\ndeny: [cancel_*]\ncompensate:\n  create_order: {tool: cancel_order}\n", "its undo cancel_order is not exposed"},
		{"an undo the allow list leaves out", "name: shop\nallow: [create_order]\ncompensate:\n  create_order: {tool: cancel_order}\n", "its undo cancel_order is not exposed"},
		{"a tool the deny list hides", "name: shop\ndeny: [create_order]\ncompensate:\n  create_order: {tool: cancel_order}\n", "create_order is not exposed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n yaml.Node
			if err := yaml.Unmarshal([]byte(c.doc), &n); err != nil {
				t.Fatal(err)
			}
			sp, err := k.Decode(n.Content[0])
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("err = %v, want %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			undo := sp.Base().Compensate
			if len(undo) != 2 || undo["create_order"].Tool != "cancel_order" || string(undo["kv_set"].Args) != `{"key":"$.args.key","value":"$.result.previous"}` {
				t.Fatalf("%+v", undo)
			}
		})
	}
}

// TestCompensateInForce: a listed tool carries its compensation only
// while its undo is listed too; a compensation of a tool the server does
// not list, or whose undo it does not list, is left off.
func TestCompensateInForce(t *testing.T) {
	k := &fakeKind{}
	var n yaml.Node
	doc := `name: shop
type: fake
tools: [create_order, cancel_order, kv_set]
compensate:
  create_order: {tool: cancel_order, args: {order_id: "$.result.id"}}
  kv_set: {tool: kv_delete, args: {key: "$.args.key"}}
  gone: {tool: cancel_order}
`
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	sp, err := k.Decode(n.Content[0])
	if err != nil {
		t.Fatal(err)
	}
	s := newSet(t, k, sp)
	tools, err := s.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tl := range tools {
		if tl.Compensate != nil {
			got[tl.Name] = tl.Compensate.Tool
		}
	}
	if len(got) != 1 || got["create_order"] != "cancel_order" {
		t.Fatalf("compensations in force: %v", got)
	}
}
