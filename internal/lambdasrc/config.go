package lambdasrc

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
)

// DefaultCallTimeout bounds one invocation when the configuration sets
// none.
const DefaultCallTimeout = 30 * time.Second

// Function is one function offered as a tool.
type Function struct {
	// Tool is the tool's name: mcp.<server>.<Tool>.
	Tool string
	// Function is the function's name or ARN (a qualifier may follow:
	// name:alias).
	Function string
	// Description, InputSchema and OutputSchema describe the tool; when
	// InputSchema is empty they are read from the function's tags
	// (TagDescription, TagInputSchema, TagOutputSchema), which needs the
	// function's ARN.
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// ReadOnly marks a function that changes nothing; Destructive false
	// one that changes things reversibly. Unsaid, a function is
	// destructive: only the configuration decides otherwise, never the
	// function's own tags.
	ReadOnly    bool
	Destructive *bool
}

// Config describes one server of Lambda functions.
type Config struct {
	Name      string
	Functions []Function
	// CallTimeout bounds one invocation; zero means DefaultCallTimeout.
	CallTimeout time.Duration
	// Allow, Deny, AllowDestructive and RequireApproval are an MCP
	// server's (mcpclient.ServerConfig), over tool names.
	Allow, Deny      []string
	AllowDestructive bool
	RequireApproval  []string
}

// fromTags reports whether f's description and schemas come from its
// tags.
func (f Function) fromTags() bool { return len(f.InputSchema) == 0 }

// Validate checks one configuration and reports the first problem.
func (c Config) Validate() error {
	if err := catalog.ValidName(c.Name); err != nil {
		return fmt.Errorf("server name: %w", err)
	}
	if len(c.Functions) == 0 {
		return fmt.Errorf("server %q: no functions", c.Name)
	}
	seen := map[string]bool{}
	for i, f := range c.Functions {
		if err := catalog.ValidName(f.Tool); err != nil {
			return fmt.Errorf("server %q: functions[%d]: tool name: %w", c.Name, i, err)
		}
		if seen[f.Tool] {
			return fmt.Errorf("server %q: functions[%d]: duplicate tool name %q", c.Name, i, f.Tool)
		}
		seen[f.Tool] = true
		if f.Function == "" || strings.ContainsAny(f.Function, " \t\r\n/") {
			return fmt.Errorf("server %q: tool %q: function %q: want a function name or ARN", c.Name, f.Tool, f.Function)
		}
		if f.fromTags() && !strings.HasPrefix(f.Function, "arn:") {
			return fmt.Errorf("server %q: tool %q: without an input_schema the function's tags describe it, and reading them needs its ARN", c.Name, f.Tool)
		}
		for what, s := range map[string]json.RawMessage{"input_schema": f.InputSchema, "output_schema": f.OutputSchema} {
			if err := checkSchema(s); err != nil {
				return fmt.Errorf("server %q: tool %q: %s: %w", c.Name, f.Tool, what, err)
			}
		}
		if f.ReadOnly && f.Destructive != nil && *f.Destructive {
			return fmt.Errorf("server %q: tool %q: read_only and destructive", c.Name, f.Tool)
		}
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("server %q: negative call timeout", c.Name)
	}
	for _, list := range [][]string{c.Allow, c.Deny, c.RequireApproval} {
		if slices.Contains(list, "") {
			return fmt.Errorf("server %q: empty pattern", c.Name)
		}
	}
	return nil
}

// checkSchema accepts an absent schema, or a JSON object within the
// input-schema bounds that compiles.
func checkSchema(s json.RawMessage) error {
	if len(s) == 0 {
		return nil
	}
	if t := strings.TrimSpace(string(s)); !strings.HasPrefix(t, "{") {
		return fmt.Errorf("a schema is a JSON object")
	}
	return argcheck.Compile(s)
}

func (c Config) callTimeout() time.Duration {
	if c.CallTimeout <= 0 {
		return DefaultCallTimeout
	}
	return c.CallTimeout
}

// Functions lists every function c names, for the template's policy.
func (c Config) functionNames() []string {
	out := make([]string, len(c.Functions))
	for i, f := range c.Functions {
		out[i] = f.Function
	}
	return out
}

// FileConfig is the on-disk shape of one Lambda server in the server list
// (`"type": "lambda"`).
type FileConfig struct {
	Name             string         `json:"name" yaml:"name"`
	Type             string         `json:"type" yaml:"type"`
	Functions        []FileFunction `json:"functions" yaml:"functions"`
	CallTimeout      string         `json:"call_timeout" yaml:"call_timeout"`
	Allow            []string       `json:"allow" yaml:"allow"`
	Deny             []string       `json:"deny" yaml:"deny"`
	AllowDestructive bool           `json:"allow_destructive" yaml:"allow_destructive"`
	RequireApproval  []string       `json:"require_approval" yaml:"require_approval"`
}

// FileFunction is the on-disk shape of Function; schemas are objects (in
// YAML as in JSON).
type FileFunction struct {
	Name         string         `json:"name" yaml:"name"`
	Function     string         `json:"function" yaml:"function"`
	Description  string         `json:"description" yaml:"description"`
	InputSchema  map[string]any `json:"input_schema" yaml:"input_schema"`
	OutputSchema map[string]any `json:"output_schema" yaml:"output_schema"`
	ReadOnly     bool           `json:"read_only" yaml:"read_only"`
	Destructive  *bool          `json:"destructive" yaml:"destructive"`
}

// Config converts the on-disk shape, and validates it.
func (f FileConfig) Config() (Config, error) {
	c := Config{Name: f.Name, Allow: f.Allow, Deny: f.Deny, AllowDestructive: f.AllowDestructive, RequireApproval: f.RequireApproval}
	if f.CallTimeout != "" {
		d, err := time.ParseDuration(f.CallTimeout)
		if err != nil {
			return Config{}, fmt.Errorf("server %q: call_timeout: %w", f.Name, err)
		}
		c.CallTimeout = d
	}
	for _, ff := range f.Functions {
		fn := Function{Tool: ff.Name, Function: ff.Function, Description: ff.Description, ReadOnly: ff.ReadOnly, Destructive: ff.Destructive}
		for _, s := range []struct {
			in  map[string]any
			out *json.RawMessage
		}{{ff.InputSchema, &fn.InputSchema}, {ff.OutputSchema, &fn.OutputSchema}} {
			if s.in == nil {
				continue
			}
			raw, err := json.Marshal(s.in)
			if err != nil {
				return Config{}, fmt.Errorf("server %q: tool %q: schema: %w", f.Name, ff.Name, err)
			}
			*s.out = raw
		}
		c.Functions = append(c.Functions, fn)
	}
	return c, c.Validate()
}
