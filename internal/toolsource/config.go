package toolsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/compensate"
	"github.com/pml-sandbox/pml/internal/secretref"
)

// DefaultCallTimeout bounds one call when the server's configuration sets
// none.
const DefaultCallTimeout = 30 * time.Second

// Config is the block every server's configuration has, whatever its
// kind.
type Config struct {
	// Name is the mcp.<name> the script sees (catalog.ValidName).
	Name string
	// Type is the kind's ("mcp" when the entry says none).
	Type string
	// Allow, when not empty, lists the only tools exposed; Deny lists
	// tools never exposed (Deny wins). Globs: '*' matches any run. Deny,
	// which guards, matches without regard to case ("delete_*" hides
	// "Delete_all"); Allow, which grants, admits only what it spells.
	Allow, Deny []string
	// AllowDestructive lets destructive tools run at all (each call still
	// needs the request's allow_destructive or a person's approval).
	AllowDestructive bool
	// RequireApproval lists tools (globs, as Deny) that need the same
	// consent as destructive ones whatever they say of themselves.
	RequireApproval []string
	// CallTimeout bounds one call; zero means DefaultCallTimeout.
	CallTimeout time.Duration
	// Headers are sent with every HTTP request of the kinds that speak
	// HTTP. Values may reference secrets (${env:NAME}, ${file:/path},
	// ${secret:ARN-or-name[#key]}), resolved by the kind; never logged.
	Headers map[string]string
	// IdempotencyKeys says the server honours idempotency keys: a call of
	// any of its tools sent again with the same key (CallOptions.
	// IdempotencyKey) is applied once. An effect of its tools that was in
	// flight when its run was lost may then be sent again
	// (docs/EFFECTS.md); tools annotated idempotentHint count as
	// honouring keys whatever this says.
	IdempotencyKeys bool
	// Compensate declares, by tool, the call that undoes a call of it
	// (internal/compensate): a tool of this server, and its arguments
	// built from the call's arguments and result. The Set checks, each
	// time the tools are listed, that both tools are listed and exposed,
	// and sets catalog.Tool.Compensate on the tool.
	Compensate map[string]*compensate.Template
}

// Base implements Spec: a kind's configuration embeds Config.
func (c Config) Base() Config { return c }

// Timeout is the call timeout in force.
func (c Config) Timeout() time.Duration {
	if c.CallTimeout <= 0 {
		return DefaultCallTimeout
	}
	return c.CallTimeout
}

// Refusal says why the allow and deny lists hide tool, "" when they let
// it through (catalog.Refusal: one rule for every kind).
func (c Config) Refusal(tool string) string { return catalog.Refusal(c.Allow, c.Deny, tool) }

// RequiresApproval reports whether require_approval names tool, in any
// case.
func (c Config) RequiresApproval(tool string) bool {
	return catalog.MatchAnyToolGlob(c.RequireApproval, tool)
}

// HeaderNames lists the configured headers' names, sorted (what a printed
// configuration shows instead of their values).
func (c Config) HeaderNames() []string {
	out := make([]string, 0, len(c.Headers))
	for k := range c.Headers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// HasHeader reports whether a header of that name (in any case) is
// configured.
func (c Config) HasHeader(name string) bool {
	for k := range c.Headers {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// Validate checks the common block and reports the first problem, naming
// the server.
func (c Config) Validate() error {
	if err := catalog.ValidName(c.Name); err != nil {
		return &FieldError{Server: c.Name, Path: []string{"name"}, Label: "server name", Err: err}
	}
	if c.CallTimeout < 0 {
		return &FieldError{Server: c.Name, Path: []string{"call_timeout"}, Err: errors.New("negative")}
	}
	for _, k := range c.HeaderNames() {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return &FieldError{Server: c.Name, Path: []string{"headers", k}, Label: "headers", Err: fmt.Errorf("invalid header name %q", k)}
		}
		if err := secretref.Check(c.Headers[k]); err != nil {
			return &FieldError{Server: c.Name, Path: []string{"headers", k}, Label: "header " + k, Err: err}
		}
	}
	for _, l := range []struct {
		key  string
		list []string
	}{{"allow", c.Allow}, {"deny", c.Deny}, {"require_approval", c.RequireApproval}} {
		if i := slices.Index(l.list, ""); i >= 0 {
			return &FieldError{Server: c.Name, Path: []string{l.key, strconv.Itoa(i)}, Label: l.key, Err: errors.New("an empty pattern")}
		}
	}
	return c.validateCompensate()
}

// validateCompensate checks the declared compensations against what the
// configuration alone can tell: names that can be tools, and neither the
// tool nor its undo hidden by allow and deny (a compensation cannot reach
// what the deployment does not expose). That both exist is checked when
// the server lists its tools.
func (c Config) validateCompensate() error {
	for _, tool := range slices.Sorted(maps.Keys(c.Compensate)) {
		tpl := c.Compensate[tool]
		fail := func(err error) error {
			return &FieldError{Server: c.Name, Path: []string{"compensate", tool}, Label: "compensate." + tool, Err: err}
		}
		switch {
		case tpl == nil:
			return fail(errors.New("no compensation"))
		case catalog.ValidName(tool) != nil:
			return fail(catalog.ValidName(tool))
		case catalog.ValidName(tpl.Tool) != nil:
			return fail(fmt.Errorf("tool: %w", catalog.ValidName(tpl.Tool)))
		case c.Refusal(tool) != "":
			return fail(fmt.Errorf("%s is not exposed (%s): it can have no effect to undo", tool, c.Refusal(tool)))
		case c.Refusal(tpl.Tool) != "":
			return fail(fmt.Errorf("its undo %s is not exposed (%s): a compensation may only call a tool the deployment exposes", tpl.Tool, c.Refusal(tpl.Tool)))
		}
	}
	return nil
}

// Fields is the common block as the server list writes it; a kind's
// entry type embeds it inline (`yaml:",inline"`) beside its own fields.
// Durations are strings ("30s").
type Fields struct {
	Name             string            `yaml:"name"`
	Type             string            `yaml:"type"`
	Allow            []string          `yaml:"allow"`
	Deny             []string          `yaml:"deny"`
	AllowDestructive bool              `yaml:"allow_destructive"`
	RequireApproval  []string          `yaml:"require_approval"`
	CallTimeout      string            `yaml:"call_timeout"`
	Headers          map[string]string `yaml:"headers"`
	IdempotencyKeys  bool              `yaml:"idempotency_keys"`
	// Compensate is read by ParseCompensate: {TOOL: {tool: UNDO, args:
	// {…}}}, strictly.
	Compensate yaml.Node `yaml:"compensate"`
}

// Config converts the written block, and validates it.
func (f Fields) Config() (Config, error) {
	c := Config{Name: f.Name, Type: f.Type, Allow: f.Allow, Deny: f.Deny, AllowDestructive: f.AllowDestructive,
		RequireApproval: f.RequireApproval, Headers: f.Headers, IdempotencyKeys: f.IdempotencyKeys}
	var err error
	if c.CallTimeout, err = Duration(f.Name, "call_timeout", f.CallTimeout); err != nil {
		return Config{}, err
	}
	if c.Compensate, err = ParseCompensate(f.Name, &f.Compensate); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

// ParseCompensate reads a server's compensate block: by tool name, the
// tool of the same server that undoes a call of it and its arguments, a
// JSON template whose strings "$.args…" and "$.result…" are references
// (internal/compensate). Every key is checked: a typo cannot silently
// change what an undo does. A missing block is none.
func ParseCompensate(server string, n *yaml.Node) (map[string]*compensate.Template, error) {
	if n == nil || n.Kind == 0 || n.Tag == "!!null" {
		return nil, nil
	}
	fail := func(line int, path []string, err error) error {
		return &FieldError{Server: server, Path: path, Label: strings.Join(path, "."), Err: fmt.Errorf("line %d: %w", line, err)}
	}
	if n.Kind != yaml.MappingNode {
		return nil, fail(n.Line, []string{"compensate"}, errors.New("want an object: {TOOL: {tool: UNDO, args: {…}}}"))
	}
	out := map[string]*compensate.Template{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := []string{"compensate", k.Value}
		if _, dup := out[k.Value]; dup {
			return nil, fail(k.Line, path, errors.New("declared twice"))
		}
		if v.Kind != yaml.MappingNode {
			return nil, fail(v.Line, path, errors.New("want an object: {tool: UNDO, args: {…}}"))
		}
		var tool string
		var args json.RawMessage
		for j := 0; j+1 < len(v.Content); j += 2 {
			fk, fv := v.Content[j], v.Content[j+1]
			switch fk.Value {
			case "tool":
				if fv.Kind != yaml.ScalarNode || fv.Tag != "!!str" {
					return nil, fail(fv.Line, append(path, "tool"), errors.New("want the undoing tool's name"))
				}
				tool = fv.Value
			case "args":
				var a any
				if err := fv.Decode(&a); err != nil {
					return nil, fail(fv.Line, append(path, "args"), err)
				}
				b, err := json.Marshal(a)
				if err != nil {
					return nil, fail(fv.Line, append(path, "args"), fmt.Errorf("not JSON: %w", err))
				}
				args = b
			default:
				return nil, fail(fk.Line, path, fmt.Errorf("unknown field %q (a compensation has tool and args)", fk.Value))
			}
		}
		tpl, err := compensate.Compile(tool, args)
		if err != nil {
			return nil, fail(v.Line, path, err)
		}
		out[k.Value] = tpl
	}
	return out, nil
}

// Duration reads one duration field ("" is zero), naming the server and
// the field in its error.
func Duration(server, field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &FieldError{Server: server, Path: []string{field}, Err: fmt.Errorf("%q is not a duration such as 30s or 2m", s)}
	}
	return d, nil
}

// DecodeEntry decodes one server-list entry into v (a pointer to a
// struct whose fields carry yaml tags), refusing a key v has no field for
// — in the entry and in every block nested in it (a list of functions, an
// object of options) — so that a typo cannot silently change what runs.
// Errors name the key and its line in the document, never a Go type. A
// field of type yaml.Node is left for its kind to decode (DecodeEntry
// again: an auth block).
func DecodeEntry(entry *yaml.Node, v any) error {
	if entry.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want an object", entry.Line)
	}
	if err := checkKeys(entry, reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	if err := entry.Decode(v); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return errors.New(readableTypeErrors(te.Errors))
		}
		return err
	}
	return nil
}

var yamlNodeType = reflect.TypeFor[yaml.Node]()

// checkKeys refuses a key of the mapping n that the struct type t has no
// field for, then checks the blocks nested under its fields the same way
// (structs, lists of structs, pointers to either). Values of another
// shape than the field's are left to the decoder, which says so.
func checkKeys(n *yaml.Node, t reflect.Type, where string) error {
	fields := yamlFields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ft, ok := fields[k.Value]
		if !ok {
			return fmt.Errorf("line %d: unknown field %q%s", k.Line, k.Value, where)
		}
		if err := checkNested(v, ft, " in "+k.Value); err != nil {
			return err
		}
	}
	return nil
}

// checkNested checks the block v written for a field of type t.
func checkNested(v *yaml.Node, t reflect.Type, where string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == yamlNodeType:
		return nil
	case t.Kind() == reflect.Struct && v.Kind == yaml.MappingNode:
		return checkKeys(v, t, where)
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && v.Kind == yaml.SequenceNode:
		for i, item := range v.Content {
			if err := checkNested(item, t.Elem(), fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// FieldError is a configuration error about one field of a server's
// entry: Path names it from the entry (["call_timeout"], ["functions",
// "0"], ["headers", "X-Key"]), so that the server list can tell the line
// it stands on. Label, when set, names it in the message instead of the
// path (tool "get_order").
type FieldError struct {
	Server string
	Path   []string
	Label  string
	Err    error
}

// Error implements error: the server, the field and what is wrong.
func (e *FieldError) Error() string {
	label := e.Label
	if label == "" {
		label = strings.Join(e.Path, ".")
	}
	if e.Server == "" {
		return fmt.Sprintf("%s: %v", label, e.Err)
	}
	return fmt.Sprintf("server %q: %s: %v", e.Server, label, e.Err)
}

// Unwrap returns what is wrong.
func (e *FieldError) Unwrap() error { return e.Err }

// Decode decodes an entry into v, a kind's entry type that embeds Fields
// (fields points at it), and returns the common block, validated: the
// prologue of every kind's Decode.
func Decode(entry *yaml.Node, v any, fields *Fields) (Config, error) {
	if err := DecodeEntry(entry, v); err != nil {
		return Config{}, err
	}
	return fields.Config()
}

// Validator is a kind's configuration: a Spec that checks itself.
type Validator interface {
	Spec
	Validate() error
}

// SpecAs is the prologue of every kind's Open: spec as the kind's own
// configuration type T, validated (a Spec built in code never went
// through Decode).
func SpecAs[T Validator](spec Spec) (T, error) {
	c, ok := spec.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("not a %T: %T", zero, spec)
	}
	return c, c.Validate()
}

// yamlFields maps the keys a struct type takes, its inline fields' too,
// to their fields' types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case opts == "inline" && f.Type.Kind() == reflect.Struct:
			maps.Copy(out, yamlFields(f.Type))
		case name != "":
			out[name] = f.Type
		case f.IsExported():
			out[strings.ToLower(f.Name)] = f.Type
		}
	}
	return out
}

// typeError reads yaml.v3's "line 4: cannot unmarshal !!str `x` into
// int": the line, the YAML tag of what was written, its text (for a
// scalar) and the Go type it was to become.
var typeError = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")

// readableTypeErrors says what a field wanted in the words of the
// document (a number, a list), not of the Go struct it was read into nor
// of YAML's tags.
func readableTypeErrors(errs []string) string {
	for i, e := range errs {
		m := typeError.FindStringSubmatch(e)
		if m == nil {
			continue
		}
		got := map[string]string{"seq": "a list", "map": "an object", "str": "a string", "int": "a number", "float": "a number",
			"bool": "true or false", "null": "nothing", "timestamp": "a date"}[m[2]]
		if got == "" {
			got = "a value"
		}
		if m[3] != "" {
			got += " (" + m[3] + ")"
		}
		errs[i] = fmt.Sprintf("line %s: %s where %s belongs", m[1], got, wanted(m[4]))
	}
	return strings.Join(errs, "; ")
}

// wanted names a Go type as what the document should hold there.
func wanted(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") || strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "an object"
}
