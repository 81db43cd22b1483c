package demoserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Name is the server name the demo tools go by, in process and as the MCP
// server `pml serve` starts: mcp.demo.<tool>.
const Name = "demo"

// MaxSleep bounds the sleep tool.
const MaxSleep = 60 * time.Second

// Tool is one demo tool: its definition as MCP lists it, and its handler.
type Tool struct {
	Name         string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage // nil when the result is not an object
	Annotations  catalog.Annotations
	// Immediate tools answer without waiting (every tool but sleep), so
	// an in-process host may answer them on the calling goroutine.
	Immediate bool

	call func(t *Tools, ctx context.Context, args json.RawMessage) (any, error)
}

var (
	yes, no = true, false
	// readOnly is how every demo tool but the key-value writers is
	// annotated; every hint is set, because MCP's defaults (and mcp-go's)
	// make an unannotated tool destructive.
	readOnly = catalog.Annotations{ReadOnly: &yes, Destructive: &no, Idempotent: &yes, OpenWorld: &no}
)

// definitions are the demo tools, in the order they are listed.
var definitions = []Tool{
	{Name: "echo", Description: "Returns its arguments unchanged.", Immediate: true, Annotations: readOnly,
		InputSchema:  json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object"}`),
		call:         func(_ *Tools, _ context.Context, args json.RawMessage) (any, error) { return args, nil }},
	{Name: "add", Description: "Adds two numbers: {a, b} → a + b.", Immediate: true, Annotations: readOnly,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`),
		call:        (*Tools).add},
	{Name: "fail", Description: "Always fails with TOOL_ERROR and the given {message}: for trying error handling.", Immediate: true, Annotations: readOnly,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}}}`),
		call:        (*Tools).fail},
	{Name: "sleep", Description: fmt.Sprintf("Waits {ms} milliseconds (at most %d), then returns {slept_ms}: for trying timeouts and parallel calls.", MaxSleep.Milliseconds()), Annotations: readOnly,
		InputSchema:  json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"ms":{"type":"number","minimum":0,"maximum":%d}},"required":["ms"]}`, MaxSleep.Milliseconds())),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"slept_ms":{"type":"number"}}}`),
		call:         (*Tools).sleep},
	{Name: "kv_set", Description: "Store a JSON value under a key in the scratch key-value store.", Immediate: true,
		Annotations:  catalog.Annotations{ReadOnly: &no, Destructive: &no, Idempotent: &yes, OpenWorld: &no},
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"the key"},"value":{"description":"any JSON value"}},"required":["key","value"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"stored":{"type":"boolean"}}}`),
		call:         (*Tools).kvSet},
	{Name: "kv_get", Description: "Read the JSON value stored under a key.", Immediate: true, Annotations: readOnly,
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"found":{"type":"boolean"},"value":{}}}`),
		call:         (*Tools).kvGet},
	{Name: "kv_list", Description: "List the keys in the scratch store, optionally those starting with a prefix.", Immediate: true, Annotations: readOnly,
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"prefix":{"type":"string"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"keys":{"type":"array","items":{"type":"string"}}}}`),
		call:         (*Tools).kvList},
	{Name: "kv_delete", Description: "Delete a key from the scratch store.", Immediate: true,
		Annotations: catalog.Annotations{ReadOnly: &no, Destructive: &yes, Idempotent: &yes, OpenWorld: &no},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`),
		call:        (*Tools).kvDelete},
	{Name: "word_count", Description: "Count the words, lines and characters of a text.", Immediate: true, Annotations: readOnly,
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"words":{"type":"integer"},"lines":{"type":"integer"},"chars":{"type":"integer"}}}`),
		call:         (*Tools).wordCount},
	{Name: "transform_text", Description: "Transform a text: upper, lower, title case or reverse.", Immediate: true, Annotations: readOnly,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"op":{"type":"string","enum":["upper","lower","title","reverse"]}},"required":["text","op"]}`),
		call:        (*Tools).transformText},
	{Name: "now", Description: "The current time as ISO 8601 and Unix milliseconds.", Immediate: true,
		Annotations:  catalog.Annotations{ReadOnly: &yes, Destructive: &no, Idempotent: &no, OpenWorld: &no},
		InputSchema:  json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"iso":{"type":"string"},"unix_ms":{"type":"integer"}}}`),
		call:         (*Tools).now},
}

// Definitions returns the demo tools' definitions, in listing order.
func Definitions() []Tool { return slices.Clone(definitions) }

// byName indexes definitions: Call is on the benchmarked per-call path.
var byName = func() map[string]*Tool {
	m := make(map[string]*Tool, len(definitions))
	for i := range definitions {
		m[definitions[i].Name] = &definitions[i]
	}
	return m
}()

// Lookup returns the definition of the demo tool called name.
func Lookup(name string) (Tool, bool) {
	if def := byName[name]; def != nil {
		return *def, true
	}
	return Tool{}, false
}

// Tools is one demo tool set with its own scratch key-value store. It is
// safe for concurrent use; the zero value is not (use New).
type Tools struct {
	mu sync.Mutex
	kv map[string]json.RawMessage
}

// New returns a demo tool set with an empty store.
func New() *Tools { return &Tools{kv: map[string]json.RawMessage{}} }

// Call runs the tool name with args (a JSON object; empty means {}) and
// returns its result as JSON. Arguments are decoded, not validated against
// the input schema: callers that want schema errors (the executor, an MCP
// client) check first. Errors are *fault.Error: TOOL_NOT_FOUND,
// INVALID_ARGUMENTS, TOOL_ERROR (fail, a missing key), TIMEOUT (a sleep
// cut short).
func (t *Tools) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	def := byName[name]
	if def == nil {
		return nil, fault.New(fault.ToolNotFound, "the demo tools have no %q", name).WithTool(Name + ":" + name)
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	v, err := def.call(t, ctx, args)
	if err != nil {
		return nil, fault.As(err).WithTool(Name + ":" + name)
	}
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(v)
}

// decode reads args into v; a failure is INVALID_ARGUMENTS.
func decode(args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		return fault.Wrap(fault.InvalidArguments, err, "arguments")
	}
	return nil
}

func (*Tools) add(_ context.Context, args json.RawMessage) (any, error) {
	var a struct{ A, B *float64 }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if a.A == nil || a.B == nil {
		return nil, fault.New(fault.InvalidArguments, "add needs numbers a and b")
	}
	return *a.A + *a.B, nil
}

func (*Tools) fail(_ context.Context, args json.RawMessage) (any, error) {
	var a struct{ Message string }
	_ = json.Unmarshal(args, &a) // any message, or none, fails the same way
	if a.Message == "" {
		a.Message = "the demo tool failed as asked"
	}
	return nil, fault.New(fault.ToolError, "%s", a.Message)
}

func (*Tools) sleep(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct{ MS *float64 }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if a.MS == nil || *a.MS < 0 || *a.MS > float64(MaxSleep.Milliseconds()) {
		return nil, fault.New(fault.InvalidArguments, "ms must be between 0 and %d", MaxSleep.Milliseconds())
	}
	timer := time.NewTimer(time.Duration(*a.MS * float64(time.Millisecond)))
	defer timer.Stop()
	select {
	case <-timer.C:
		return map[string]float64{"slept_ms": *a.MS}, nil
	case <-ctx.Done():
		return nil, fault.Wrap(fault.Timeout, ctx.Err(), "sleep interrupted")
	}
}

func (t *Tools) kvSet(_ context.Context, args json.RawMessage) (any, error) {
	var a struct {
		Key   string
		Value json.RawMessage
	}
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if a.Value == nil {
		return nil, fault.New(fault.InvalidArguments, "kv_set needs a value")
	}
	t.mu.Lock()
	t.kv[a.Key] = a.Value
	t.mu.Unlock()
	return map[string]any{"key": a.Key, "stored": true}, nil
}

// withKey decodes the {key} arguments of kv_get and kv_delete and runs f
// with it, holding the store's lock.
func (t *Tools) withKey(args json.RawMessage, f func(key string) (any, error)) (any, error) {
	var a struct{ Key string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return f(a.Key)
}

func (t *Tools) kvGet(_ context.Context, args json.RawMessage) (any, error) {
	return t.withKey(args, func(k string) (any, error) {
		raw, ok := t.kv[k]
		out := map[string]any{"key": k, "found": ok}
		if ok {
			out["value"] = raw
		}
		return out, nil
	})
}

func (t *Tools) kvList(_ context.Context, args json.RawMessage) (any, error) {
	var a struct{ Prefix string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	t.mu.Lock()
	keys := []string{}
	for k := range t.kv {
		if strings.HasPrefix(k, a.Prefix) {
			keys = append(keys, k)
		}
	}
	t.mu.Unlock()
	slices.Sort(keys)
	return map[string]any{"keys": keys}, nil
}

func (t *Tools) kvDelete(_ context.Context, args json.RawMessage) (any, error) {
	return t.withKey(args, func(k string) (any, error) {
		if _, ok := t.kv[k]; !ok {
			return nil, fault.New(fault.ToolError, "no key %s", k)
		}
		delete(t.kv, k)
		return "deleted " + k, nil
	})
}

func (*Tools) wordCount(_ context.Context, args json.RawMessage) (any, error) {
	var a struct{ Text string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	return map[string]int{
		"words": len(strings.Fields(a.Text)),
		"lines": strings.Count(a.Text, "\n") + 1,
		"chars": len([]rune(a.Text)),
	}, nil
}

func (*Tools) transformText(_ context.Context, args json.RawMessage) (any, error) {
	var a struct{ Text, Op string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	rs := []rune(a.Text)
	switch a.Op {
	case "upper":
		return strings.ToUpper(a.Text), nil
	case "lower":
		return strings.ToLower(a.Text), nil
	case "title":
		for i := range rs {
			if i == 0 || unicode.IsSpace(rs[i-1]) {
				rs[i] = unicode.ToUpper(rs[i])
			}
		}
		return string(rs), nil
	case "reverse":
		slices.Reverse(rs)
		return string(rs), nil
	}
	return nil, fault.New(fault.InvalidArguments, "op must be upper, lower, title or reverse")
}

func (*Tools) now(context.Context, json.RawMessage) (any, error) {
	t := time.Now().UTC()
	return map[string]any{"iso": t.Format(time.RFC3339Nano), "unix_ms": t.UnixMilli()}, nil
}
