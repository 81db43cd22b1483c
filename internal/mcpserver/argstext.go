package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// A call's arguments, told in a text that asks about the call (the
// elicitation's question, the suspended document's text for a model). The
// script writes the arguments, so it chooses what a cut would keep: cut as
// one string, a long reassuring value put first hides every key after it.
// Here every key is shown, each value is cut on its own, and a cut says how
// much of what was cut. The JSON document (structuredContent, the HTTP
// answer) always has the arguments whole.

// Bounds of the rendering.
const (
	// maxKeyBytes is the longest key shown whole.
	maxKeyBytes = 64
	// minValueBytes is the least a cut value keeps of itself, however
	// many share the budget: enough to recognise it.
	minValueBytes = 12
	// maxDepth is how deep arguments are rendered: below it a value is
	// told by its size.
	maxDepth = 32
)

// argsText renders args (a JSON value) in about budget bytes: as they are
// when they fit, else with every object key shown and each value cut on its
// own, the budget shared so that short values stay whole. budget is a
// target, not a bound: keys are never dropped to meet it (callers that need
// a bound check the length, and try briefArgs). Characters that reorder text on
// screen are escaped wherever they are.
func argsText(args json.RawMessage, budget int) string {
	var compact bytes.Buffer
	if json.Compact(&compact, args) != nil {
		return cutValue(string(args), budget) // not JSON: a host bug, told as text
	}
	if compact.Len() <= budget {
		return escapeControls(compact.String())
	}
	n, err := parseNode(args)
	if err != nil {
		return cutValue(compact.String(), budget)
	}
	var b strings.Builder
	n.render(&b, budget, 0)
	return b.String()
}

// briefArgs renders args with every key and the least of each value: what
// a text too small for argsText shows.
func briefArgs(args json.RawMessage) string { return argsText(args, 0) }

// node is a parsed JSON value, object keys in their order.
type node struct {
	kind   byte   // '{', '[', '"' or 0 for a number, true, false, null
	text   string // a string's value, another scalar's JSON
	keys   []string
	values []*node
	size   int // bytes of its compact JSON
}

// parseNode reads one JSON value, keeping the order of object keys.
func parseNode(raw []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	n, err := readNode(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data")
	}
	return n, nil
}

func readNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &node{kind: byte(t.String()[0]), size: 2}
		for dec.More() {
			if n.kind == '{' {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string)
				n.keys = append(n.keys, key)
				n.size += len(quote(key)) + 1
			}
			v, err := readNode(dec)
			if err != nil {
				return nil, err
			}
			n.values = append(n.values, v)
			n.size += v.size
		}
		n.size += max(len(n.values)-1, 0)      // commas
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return &node{kind: '"', text: t, size: len(quote(t))}, nil
	case json.Number:
		return &node{text: t.String(), size: len(t)}, nil
	case bool:
		s := fmt.Sprint(t)
		return &node{text: s, size: len(s)}, nil
	case nil:
		return &node{text: "null", size: 4}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// render writes n in about budget bytes.
func (n *node) render(b *strings.Builder, budget, depth int) {
	switch {
	case n.size <= budget:
		n.whole(b)
		return
	case n.kind == '"':
		b.WriteString(cutString(n.text, budget))
		return
	case n.kind == 0:
		b.WriteString(cutValue(n.text, budget))
		return
	case depth >= maxDepth:
		fmt.Fprintf(b, "%c[… %d bytes not shown]%c", n.kind, n.size, closer(n.kind))
		return
	}
	// What the keys and punctuation take comes first; the values share
	// the rest.
	keys := make([]string, len(n.keys))
	room := budget - 2 - max(len(n.values)-1, 0)
	for i, k := range n.keys {
		keys[i] = cutString(k, maxKeyBytes)
		room -= len(keys[i]) + 1
	}
	shares := share(n.values, room)
	b.WriteByte(n.kind)
	for i, v := range n.values {
		if i > 0 {
			b.WriteByte(',')
		}
		if n.kind == '{' {
			b.WriteString(keys[i])
			b.WriteByte(':')
		}
		v.render(b, shares[i], depth+1)
	}
	b.WriteByte(closer(n.kind))
}

// whole writes n's compact JSON, direction controls escaped.
func (n *node) whole(b *strings.Builder) {
	switch n.kind {
	case '"':
		b.WriteString(quote(n.text))
	case 0:
		b.WriteString(n.text)
	default:
		b.WriteByte(n.kind)
		for i, v := range n.values {
			if i > 0 {
				b.WriteByte(',')
			}
			if n.kind == '{' {
				b.WriteString(quote(n.keys[i]))
				b.WriteByte(':')
			}
			v.whole(b)
		}
		b.WriteByte(closer(n.kind))
	}
}

func closer(kind byte) byte {
	if kind == '{' {
		return '}'
	}
	return ']'
}

// share splits room between values: each gets an equal share, and what a
// short value does not use goes to the longer ones (shortest first), so
// that one long value cannot take what the others need.
func share(values []*node, room int) []int {
	out := make([]int, len(values))
	order := make([]int, len(values))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return values[a].size - values[b].size })
	left := max(room, 0)
	for done, i := range order {
		fair := left / (len(order) - done)
		out[i] = min(values[i].size, fair)
		left -= out[i]
	}
	return out
}

// cutString is s as a JSON string in about n bytes: whole, or its
// beginning and how much of it was cut.
func cutString(s string, n int) string {
	q := quote(s)
	if len(q) <= n {
		return q
	}
	// The quotes, the ellipsis and the marker come out of n too.
	kept := truncateUTF8(s, max(n-5-len(cutMarker(len(s), len(s))), minValueBytes))
	return quote(kept+"…") + cutMarker(len(s)-len(kept), len(s))
}

// cutValue is the JSON text s in about n bytes.
func cutValue(s string, n int) string {
	if len(s) <= n {
		return escapeControls(s)
	}
	kept := truncateUTF8(s, max(n-3-len(cutMarker(len(s), len(s))), minValueBytes))
	return escapeControls(kept) + "…" + cutMarker(len(s)-len(kept), len(s))
}

func cutMarker(cut, of int) string {
	return fmt.Sprintf("[… %d of %d bytes cut]", cut, of)
}

// quote is s as a JSON string, HTML characters as they are, direction
// controls escaped.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return escapeControls(strings.TrimSuffix(b.String(), "\n"))
}

// directionControls reorder or hide text on screen: a value holding one
// could turn what the person reads around. JSON's encoder leaves them.
var directionControls = strings.NewReplacer(
	"\u061c", `\u061c`, "\u200e", `\u200e`, "\u200f", `\u200f`,
	"\u202a", `\u202a`, "\u202b", `\u202b`, "\u202c", `\u202c`, "\u202d", `\u202d`, "\u202e", `\u202e`,
	"\u2066", `\u2066`, "\u2067", `\u2067`, "\u2068", `\u2068`, "\u2069", `\u2069`,
)

func escapeControls(s string) string { return directionControls.Replace(s) }
