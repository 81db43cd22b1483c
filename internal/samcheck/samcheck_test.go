package samcheck

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const realTemplate = "../../template.yaml"

// TestRealTemplate checks the repository's template.yaml against the
// repository's Makefile and functions/ packages: it must pass.
func TestRealTemplate(t *testing.T) {
	for _, p := range Check(realTemplate) {
		t.Error(p)
	}
}

// want is an expected problem: its exact path and a part of its message.
type want struct{ path, message string }

// TestFixtures runs the check on the small templates in testdata/repo,
// which share a Makefile and functions/ built to exercise each check; each
// must yield exactly the problems listed, no more.
func TestFixtures(t *testing.T) {
	const fn = "/Resources/ExecuteFunction"
	const env = fn + "/Properties/Environment/Variables"
	tests := []struct {
		file string
		want []want
	}{
		{"good.yaml", nil},
		{"broken-ref.yaml", []want{{env + "/TABLE/Ref", `Ref "Tabel" names no parameter`}}},
		{"broken-getatt.yaml", []want{{env + "/TABLE_ARN/Fn::GetAtt", `Fn::GetAtt "Nope.Arn": "Nope" is no resource`}}},
		{"broken-sub.yaml", []want{
			{env + "/NAME/Fn::Sub", `${Gone.Arn}: "Gone" is no resource`},
			{env + "/NAME/Fn::Sub", `${Missing} names no parameter`},
		}},
		{"unknown-condition.yaml", []want{{fn + "/Properties/MemorySize/Fn::If/0", `unknown condition "Huge"`}}},
		{"unguarded-conditional.yaml", []want{{"/Outputs/QueueUrl/Value/Ref", "exists only when condition QueueEnabled holds"}}},
		{"dangling-dependson.yaml", []want{{"/Resources/Queue/DependsOn/0", `DependsOn "Tables" names no resource`}}},
		{"schema-violation.yaml", []want{
			{"/", `goformation cannot parse the template: json: unknown field "Colour"`},
			{"/Resources/Table/Properties/Colour", "schema: property not allowed here"},
		}},
		{"unknown-type.yaml", []want{
			{"/", "goformation cannot parse the template"},
			{"/Resources/Table/Type", `unknown resource type "AWS::DynamoDB::Tabel"`},
		}},
		{"wrong-handler.yaml", []want{{fn + "/Properties/Handler", `handler is "main"`}}},
		{"missing-codeuri.yaml", []want{{fn + "/Properties/CodeUri", `code directory "build/" does not exist`}}},
		{"missing-package.yaml", []want{{"/Resources/CapabilityFunction", "Go main package functions/capability (in CodeUri \".\"): no Go files there"}}},
		{"not-main.yaml", []want{{"/Resources/LibFunction", "lib.go is package lib, not main"}}},
		{"missing-target.yaml", []want{{"/Resources/OrphanFunction/Metadata/BuildMethod", "the Makefile has no target build-OrphanFunction"}}},
		{"wrong-build.yaml", []want{
			{"/Resources/HelloFunction/Metadata/BuildMethod", `does not contain "./functions/hello"`},
			{"/Resources/HelloFunction/Metadata/BuildMethod", `does not contain "GOARCH=arm64"`},
		}},
		{"not-yaml.yaml", []want{{filepath.Join("testdata", "repo", "not-yaml.yaml"), "not a valid YAML template"}}},
		{"no-such-file.yaml", []want{{filepath.Join("testdata", "repo", "no-such-file.yaml"), "no such file"}}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".yaml"), func(t *testing.T) {
			got := Check(filepath.Join("testdata", "repo", tt.file))
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tt.want), list(got))
			}
			for i, w := range tt.want {
				if got[i].Path != w.path || !strings.Contains(got[i].Message, w.message) {
					t.Errorf("problem %d = %v; want path %s and a message containing %q", i, got[i], w.path, w.message)
				}
			}
		})
	}
}

func list(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

// TestAllowedFalsePositivesAreNeeded keeps the allow list honest: every
// entry must be met by the real template or the good fixture, so an entry
// goformation stops needing (or the template stops using) is removed.
func TestAllowedFalsePositivesAreNeeded(t *testing.T) {
	var seen []allowedFalsePositive
	for _, path := range []string{realTemplate, filepath.Join("testdata", "repo", "good.yaml")} {
		problems, allowed := check(path)
		if len(problems) > 0 {
			t.Fatalf("%s: %v", path, problems)
		}
		seen = append(seen, allowed...)
	}
	for _, a := range allowedFalsePositives {
		if !slices.Contains(seen, a) {
			t.Errorf("allowed false positive %s (%s) is never met; remove it", a.Path, a.Keyword)
		}
	}
}

func TestAllowedFalsePositiveMatches(t *testing.T) {
	a := allowedFalsePositive{Path: "/Resources/*/Properties/Events/*/Properties/FunctionResponseTypes", Keyword: "additionalProperties"}
	def := allowedFalsePositive{Path: "/Parameters/*/Default", Keyword: "type", Got: "number"}
	tests := []struct {
		a                  allowedFalsePositive
		path, keyword, got string
		want               bool
	}{
		{a, "/Resources/Fn/Properties/Events/Q/Properties/FunctionResponseTypes", "additionalProperties", "", true},
		{a, "/Resources/Fn/Properties/Events/Q/Properties/FunctionResponseTypes", "type", "array", false},
		{a, "/Resources/Fn/Properties/FunctionResponseTypes", "additionalProperties", "", false},
		{a, "/Resources/Fn/Properties/Events/Q/Properties/FunctionResponseTypes/0", "additionalProperties", "", false},
		{a, "/Resources/Fn/Properties/Events/Q/Properties/BatchSize", "additionalProperties", "", false},
		{def, "/Parameters/Memory/Default", "type", "number", true},
		{def, "/Parameters/Memory/Default", "type", "array", false},
		{def, "/Parameters/Memory/Default/x", "type", "number", false},
	}
	for _, tt := range tests {
		if got := tt.a.matches(tt.path, tt.keyword, tt.got); got != tt.want {
			t.Errorf("%s matches(%s, %s, %s) = %v; want %v", tt.a.Path, tt.path, tt.keyword, tt.got, got, tt.want)
		}
	}
}

func TestMakefileRecipes(t *testing.T) {
	mk, err := readMakefile(filepath.Join("testdata", "repo", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target string
		want   string // "" means no such target
	}{
		{"build-ExecuteFunction", "GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -o $(ARTIFACTS_DIR)/bootstrap ./functions/execute"},
		{"build-HelloFunction", "GOOS=linux GOARCH=amd64 go build -o $(ARTIFACTS_DIR)/bootstrap ./functions/execute"},
		{"LAMBDA_GOFLAGS", ""}, // a variable, not a target
		{"build-OrphanFunction", ""},
	}
	for _, tt := range tests {
		got, ok := mk.recipe(tt.target)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("recipe(%s) = %q, %v; want %q", tt.target, got, ok, tt.want)
		}
	}
}

// TestTemplateContract pins what the rest of the project relies on in
// template.yaml: the functions the Makefile builds, the environment the
// functions read, the routes internal/httpapi serves and the traces table
// of docs/TRACES.md.
func TestTemplateContract(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ExecuteFunction", "CapabilityFunction"} {
		if typeOf(tpl.resources[id]) != "AWS::Serverless::Function" {
			t.Errorf("no function %s", id)
		}
	}
	env, _ := tpl.globals["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	for _, name := range []string{"PML_TRACES_TABLE", "PML_CAPABILITIES_TABLE", "PML_CAPABILITY_FUNCTION", "PML_MCP_SERVERS_PARAM", "PML_COMPILE_CACHE_DIR", "PML_LOG_LEVEL", "PML_TRACE_TTL_DAYS"} {
		if _, ok := vars[name]; !ok {
			t.Errorf("Globals set no %s", name)
		}
	}
	var routes []string
	for _, r := range tpl.resources {
		if typeOf(r) == "AWS::ApiGatewayV2::Route" {
			k, _ := propertiesOf(r)["RouteKey"].(string)
			routes = append(routes, k)
		}
	}
	slices.Sort(routes)
	wantRoutes := []string{"GET /capabilities", "GET /executions/{id}", "GET /healthz", "GET /mcp", "GET /tools", "POST /capabilities", "POST /execute", "POST /mcp"}
	if !slices.Equal(routes, wantRoutes) {
		t.Errorf("routes %v; want %v", routes, wantRoutes)
	}
	traces := propertiesOf(tpl.resources["TracesTable"])
	ttl, _ := traces["TimeToLiveSpecification"].(map[string]any)
	if ttl["AttributeName"] != "expires_at" || ttl["Enabled"] != true {
		t.Errorf("traces TTL %v; want expires_at, enabled", ttl)
	}
	for _, id := range []string{"TracesTable", "CapabilitiesTable"} {
		p := propertiesOf(tpl.resources[id])
		pitr, _ := p["PointInTimeRecoverySpecification"].(map[string]any)
		sse, _ := p["SSESpecification"].(map[string]any)
		if p["BillingMode"] != "PAY_PER_REQUEST" || pitr["PointInTimeRecoveryEnabled"] != true || sse["SSEEnabled"] != true {
			t.Errorf("%s: want on-demand billing, point-in-time recovery and SSE", id)
		}
		// docs/TRACES.md: pk/sk strings, nothing else declared.
		if got := len(p["AttributeDefinitions"].([]any)); got != 2 || p["GlobalSecondaryIndexes"] != nil || p["StreamSpecification"] != nil {
			t.Errorf("%s: want exactly pk and sk, no index, no stream", id)
		}
	}
}
