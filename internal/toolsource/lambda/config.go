package lambda

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

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

// Config describes one server of Lambda functions: the common block
// (name, allow, deny, require_approval, allow_destructive, call_timeout;
// over tool names) and the functions.
type Config struct {
	toolsource.Config
	Functions []Function
}

// Base implements toolsource.Spec.
func (c Config) Base() toolsource.Config {
	b := c.Config
	b.Type = Type
	return b
}

// fromTags reports whether f's description and schemas come from its
// tags.
func (f Function) fromTags() bool { return len(f.InputSchema) == 0 }

// Validate checks one configuration and reports the first problem.
func (c Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if len(c.Headers) > 0 {
		return fmt.Errorf("server %q: headers: a Lambda function is invoked with the process's AWS credentials, not HTTP headers", c.Name)
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
		if err := f.validate(); err != nil {
			return &toolsource.FieldError{Server: c.Name, Path: []string{"functions", strconv.Itoa(i)}, Label: fmt.Sprintf("tool %q", f.Tool), Err: err}
		}
	}
	return nil
}

func (f Function) validate() error {
	if f.Function == "" || strings.ContainsAny(f.Function, " \t\r\n/") {
		return fmt.Errorf("function %q: want a function name or ARN", f.Function)
	}
	if f.fromTags() && !strings.HasPrefix(f.Function, "arn:") {
		return fmt.Errorf("without an input_schema the function's tags describe it, and reading them needs its ARN")
	}
	for what, s := range map[string]json.RawMessage{"input_schema": f.InputSchema, "output_schema": f.OutputSchema} {
		if err := checkSchema(s); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if f.ReadOnly && f.Destructive != nil && *f.Destructive {
		return fmt.Errorf("read_only and destructive")
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

// FunctionNames lists every function c names (what the deployment's role
// must be allowed to invoke).
func (c Config) FunctionNames() []string {
	out := make([]string, len(c.Functions))
	for i, f := range c.Functions {
		out[i] = f.Function
	}
	return out
}

// entry is the on-disk shape of one Lambda server in the server list
// (`"type": "lambda"`).
type entry struct {
	toolsource.Fields `yaml:",inline"`
	Functions         []fileFunction `yaml:"functions"`
}

// fileFunction is the on-disk shape of Function; schemas are objects (in
// YAML as in JSON).
type fileFunction struct {
	Name         string         `yaml:"name"`
	Function     string         `yaml:"function"`
	Description  string         `yaml:"description"`
	InputSchema  map[string]any `yaml:"input_schema"`
	OutputSchema map[string]any `yaml:"output_schema"`
	ReadOnly     bool           `yaml:"read_only"`
	Destructive  *bool          `yaml:"destructive"`
}

// decode reads one entry of the server list, strictly, and validates it.
func decode(n *yaml.Node) (Config, error) {
	var f entry
	common, err := toolsource.Decode(n, &f, &f.Fields)
	if err != nil {
		return Config{}, err
	}
	c := Config{Config: common}
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
