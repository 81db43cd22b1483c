package toolsource

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
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
		return fmt.Errorf("server name: %w", err)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("server %q: negative call timeout", c.Name)
	}
	for _, k := range c.HeaderNames() {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return fmt.Errorf("server %q: invalid header name %q", c.Name, k)
		}
		if err := secretref.Check(c.Headers[k]); err != nil {
			return fmt.Errorf("server %q: header %s: %w", c.Name, k, err)
		}
	}
	for _, list := range [][]string{c.Allow, c.Deny} {
		if slices.Contains(list, "") {
			return fmt.Errorf("server %q: empty pattern in allow/deny", c.Name)
		}
	}
	if slices.Contains(c.RequireApproval, "") {
		return fmt.Errorf("server %q: empty pattern in require_approval", c.Name)
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
}

// Config converts the written block, and validates it.
func (f Fields) Config() (Config, error) {
	c := Config{Name: f.Name, Type: f.Type, Allow: f.Allow, Deny: f.Deny, AllowDestructive: f.AllowDestructive,
		RequireApproval: f.RequireApproval, Headers: f.Headers, IdempotencyKeys: f.IdempotencyKeys}
	var err error
	if c.CallTimeout, err = Duration(f.Name, "call_timeout", f.CallTimeout); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

// Duration reads one duration field ("" is zero), naming the server and
// the field in its error.
func Duration(server, field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("server %q: %s: %w", server, field, err)
	}
	return d, nil
}

// DecodeEntry decodes one server-list entry into v (a pointer to a
// struct whose fields carry yaml tags), refusing a key v has no field for
// so that a typo cannot silently change what runs. Errors name the key and
// its line in the document, never a Go type.
func DecodeEntry(entry *yaml.Node, v any) error {
	if entry.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want an object", entry.Line)
	}
	known := yamlKeys(reflect.TypeOf(v).Elem())
	for i := 0; i+1 < len(entry.Content); i += 2 {
		k := entry.Content[i]
		if !known[k.Value] {
			return fmt.Errorf("line %d: unknown field %q", k.Line, k.Value)
		}
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

// yamlKeys lists the keys a struct type takes, its inline fields' too.
func yamlKeys(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case opts == "inline" && f.Type.Kind() == reflect.Struct:
			maps.Copy(out, yamlKeys(f.Type))
		case name != "":
			out[name] = true
		case f.IsExported():
			out[strings.ToLower(f.Name)] = true
		}
	}
	return out
}

// goType finds the Go type yaml.v3 names in "cannot unmarshal !!str `x`
// into int".
var goType = regexp.MustCompile(`into [\w.\[\]*]+$`)

// readableTypeErrors says what a field wanted in the words of the
// document (a number, a list), not of the Go struct it was read into.
func readableTypeErrors(errs []string) string {
	for i, e := range errs {
		errs[i] = goType.ReplaceAllStringFunc(e, func(m string) string {
			t := strings.TrimPrefix(m, "into ")
			switch {
			case strings.HasPrefix(t, "[]"):
				return "where a list belongs"
			case strings.HasPrefix(t, "map["):
				return "where an object belongs"
			case t == "bool":
				return "where true or false belongs"
			case t == "string":
				return "where a string belongs"
			case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") || strings.HasPrefix(t, "float"):
				return "where a number belongs"
			}
			return "where an object belongs"
		})
	}
	return strings.Join(errs, "; ")
}
