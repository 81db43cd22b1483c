package samcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/aggregate"
	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/suspend"
	lambdakind "github.com/pml-sandbox/pml/internal/toolsource/lambda"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

const realTemplate = "../../template.yaml"

// skipWithout skips a test that needs cfn-lint when it is not installed,
// and fails it on any other reason the check could not run.
func skipWithout(t *testing.T, err error) {
	t.Helper()
	switch {
	case errors.Is(err, ErrNoCfnLint):
		t.Skip(err)
	case err != nil:
		t.Fatal(err)
	}
}

// TestRealTemplate checks the repository's template.yaml against the
// repository's Makefile and functions/ packages: it must pass.
func TestRealTemplate(t *testing.T) {
	problems, err := Check(realTemplate)
	for _, p := range problems {
		t.Error(p)
	}
	skipWithout(t, err)
}

// want is an expected problem: the rule that reports it (a cfn-lint rule,
// or pml:... for the project's own checks), its exact path and a part of
// its message.
type want struct{ rule, path, message string }

// TestFixtures checks the small templates in testdata/repo, which share a
// Makefile and functions/ built to exercise each check: each broken one
// must be caught, by cfn-lint or by a project check as its table row says,
// and yield exactly the problems listed, no more. cfn-lint runs once for
// all of them; without it, only the fixtures the project checks catch are
// checked.
func TestFixtures(t *testing.T) {
	const fn = "/Resources/ExecuteFunction"
	const env = fn + "/Properties/Environment/Variables"
	tests := []struct {
		file string
		want []want
	}{
		{"good.yaml", nil},
		// cfn-lint: CloudFormation references, conditions, schema, types.
		{"broken-ref.yaml", []want{{"E1020", env + "/TABLE/Ref", `'Tabel' is not one of`}}},
		{"broken-getatt.yaml", []want{{"E1010", env + "/TABLE_ARN/Fn::GetAtt/0", `'Nope' is not one of`}}},
		{"broken-sub.yaml", []want{
			{"E1019", env + "/NAME/Fn::Sub", `'Gone' is not one of`},
			{"E1019", env + "/NAME/Fn::Sub", `'Missing' is not one of`},
		}},
		{"unknown-condition.yaml", []want{
			{"W8001", "/Conditions/Big", "Condition Big not used"}, // its only use was misspelt
			{"E1028", fn + "/Properties/MemorySize/Fn::If/0", `'Huge' is not one of`},
		}},
		{"unguarded-conditional.yaml", []want{{"W1001", "/Outputs/QueueUrl/Value", "may not be available when condition 'QueueEnabled' is False"}}},
		{"dangling-dependson.yaml", []want{{"E3005", "/Resources/Queue/DependsOn", `'Tables' is not one of`}}},
		{"schema-violation.yaml", []want{{"E3002", "/Resources/Table/Properties/Colour", "'Colour' was unexpected"}}},
		{"unknown-type.yaml", []want{{"E3006", "/Resources/Table/Type", "Resource type 'AWS::DynamoDB::Tabel' does not exist"}}},
		// Both: neither reads it.
		{"not-yaml.yaml", []want{
			{"E0000", "", "did not find expected"},
			{"pml:yaml", "", "not a valid YAML template"},
		}},
		// The project's checks: what sam build needs of this repository.
		{"wrong-handler.yaml", []want{{"pml:handler", fn + "/Properties/Handler", `handler is "main"`}}},
		{"missing-codeuri.yaml", []want{{"pml:codeuri", fn + "/Properties/CodeUri", `CodeUri "build/" is not a directory`}}},
		{"missing-package.yaml", []want{{"pml:package", "/Resources/CapabilityFunction", "Go main package functions/capability (in CodeUri \".\"): cannot find package"}}},
		{"not-main.yaml", []want{{"pml:package", "/Resources/LibFunction", "package lib, not main"}}},
		{"missing-target.yaml", []want{{"pml:make", "/Resources/OrphanFunction/Metadata/BuildMethod", "No rule to make target 'build-OrphanFunction'"}}},
		{"wrong-build.yaml", []want{
			{"pml:make", "/Resources/HelloFunction/Metadata/BuildMethod", `does not run "./functions/hello"`},
			{"pml:make", "/Resources/HelloFunction/Metadata/BuildMethod", `does not run "GOARCH=arm64"`},
		}},
		{"no-such-file.yaml", []want{{"pml:file", "", "no such file"}}},
	}
	var files []string
	for _, tt := range tests {
		files = append(files, filepath.Join("testdata", "repo", tt.file))
	}
	problems, err := Check(files...)
	noLint := errors.Is(err, ErrNoCfnLint)
	if err != nil && !noLint {
		t.Fatal(err)
	}
	for i, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".yaml"), func(t *testing.T) {
			var got []Problem
			for _, p := range problems {
				if p.File == files[i] {
					got = append(got, p)
				}
			}
			wants := tt.want
			if noLint {
				wants = slices.DeleteFunc(slices.Clone(wants), func(w want) bool { return !strings.HasPrefix(w.rule, "pml:") })
				if len(tt.want) > 0 && len(wants) == 0 {
					t.Skip(err)
				}
			}
			if len(got) != len(wants) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(wants), list(got))
			}
			for i, w := range wants {
				if got[i].Rule != w.rule || got[i].Path != w.path || !strings.Contains(got[i].Message, w.message) {
					t.Errorf("problem %d = %v; want [%s] at %q and a message containing %q", i, got[i], w.rule, w.path, w.message)
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

// TestWithoutCfnLint: with no cfn-lint on PATH the check says so and still
// runs the project's checks.
func TestWithoutCfnLint(t *testing.T) {
	make, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	dir := t.TempDir()
	if err := os.Symlink(make, filepath.Join(dir, "make")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	problems, err := Check(filepath.Join("testdata", "repo", "wrong-handler.yaml"))
	if !errors.Is(err, ErrNoCfnLint) {
		t.Errorf("error %v; want ErrNoCfnLint", err)
	}
	if len(problems) != 1 || problems[0].Rule != "pml:handler" {
		t.Errorf("problems %v; want the handler problem alone", problems)
	}
}

// TestTemplateContract pins what the rest of the project relies on in
// template.yaml: the functions the Makefile builds, the environment the
// functions read, the routes internal/httpapi serves, the traces table
// of docs/TRACES.md and the suspensions table of internal/suspend.
func TestTemplateContract(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ExecuteFunction", "CapabilityFunction", "AggregateFunction"} {
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
	wantRoutes := slices.Sorted(slices.Values(httpapi.RouteKeys()))
	if !slices.Equal(routes, wantRoutes) {
		t.Errorf("routes %v; want %v", routes, wantRoutes)
	}
	traces := propertiesOf(tpl.resources["TracesTable"])
	ttl, _ := traces["TimeToLiveSpecification"].(map[string]any)
	if ttl["AttributeName"] != "expires_at" || ttl["Enabled"] != true {
		t.Errorf("traces TTL %v; want expires_at, enabled", ttl)
	}
	// The suspensions table of internal/suspend: TTL on ttl, and no
	// point-in-time recovery (template.yaml says why); only the execute
	// function has it.
	susp := propertiesOf(tpl.resources["SuspensionsTable"])
	sttl, _ := susp["TimeToLiveSpecification"].(map[string]any)
	sse, _ := susp["SSESpecification"].(map[string]any)
	if sttl["AttributeName"] != "ttl" || sttl["Enabled"] != true || susp["BillingMode"] != "PAY_PER_REQUEST" || sse["SSEEnabled"] != true || susp["PointInTimeRecoverySpecification"] != nil {
		t.Errorf("suspensions table %v; want TTL on ttl, on-demand billing, SSE, no PITR", susp)
	}
	if got, _ := susp["AttributeDefinitions"].([]any); len(got) != 2 || susp["GlobalSecondaryIndexes"] != nil || susp["StreamSpecification"] != nil {
		t.Errorf("SuspensionsTable: want exactly pk and sk, no index, no stream")
	}
	fenv, _ := propertiesOf(tpl.resources["ExecuteFunction"])["Environment"].(map[string]any)
	fvars, _ := fenv["Variables"].(map[string]any)
	if _, ok := fvars["PML_SUSPENSIONS_TABLE"]; !ok {
		t.Errorf("ExecuteFunction sets no PML_SUSPENSIONS_TABLE")
	}
	for _, id := range []string{"TracesTable", "CapabilitiesTable"} {
		p := propertiesOf(tpl.resources[id])
		pitr, _ := p["PointInTimeRecoverySpecification"].(map[string]any)
		sse, _ := p["SSESpecification"].(map[string]any)
		if p["BillingMode"] != "PAY_PER_REQUEST" || pitr["PointInTimeRecoveryEnabled"] != true || sse["SSEEnabled"] != true {
			t.Errorf("%s: want on-demand billing, point-in-time recovery and SSE", id)
		}
	}
	// docs/TRACES.md: pk/sk strings, nothing else declared.
	if got := len(traces["AttributeDefinitions"].([]any)); got != 2 || traces["GlobalSecondaryIndexes"] != nil {
		t.Errorf("TracesTable: want exactly pk and sk, no index")
	}
	// The capability registry's table: pk/sk and the sparse latest index
	// capability.CreateTable declares, keys lpk/changed, every attribute
	// projected.
	caps := propertiesOf(tpl.resources["CapabilitiesTable"])
	b, _ := json.Marshal([]any{caps["AttributeDefinitions"], caps["GlobalSecondaryIndexes"]})
	wantCaps := `[[{"AttributeName":"pk","AttributeType":"S"},{"AttributeName":"sk","AttributeType":"S"},{"AttributeName":"lpk","AttributeType":"S"},{"AttributeName":"changed","AttributeType":"S"}],` +
		`[{"IndexName":"` + capability.LatestIndex + `","KeySchema":[{"AttributeName":"lpk","KeyType":"HASH"},{"AttributeName":"changed","KeyType":"RANGE"}],"Projection":{"ProjectionType":"ALL"}}]]`
	if string(b) != wantCaps {
		t.Errorf("CapabilitiesTable: attributes and indexes %s; want %s", b, wantCaps)
	}
	// The traces table's stream feeds the aggregator, which needs the old
	// image of a rewritten execution (tracedb.CoOccurrence); the
	// capabilities table has none.
	stream, _ := traces["StreamSpecification"].(map[string]any)
	if len(stream) != 1 || stream["StreamViewType"] != "NEW_AND_OLD_IMAGES" {
		t.Errorf("traces table stream %v; want NEW_AND_OLD_IMAGES", stream)
	}
	if propertiesOf(tpl.resources["CapabilitiesTable"])["StreamSpecification"] != nil {
		t.Errorf("CapabilitiesTable has a stream")
	}
}

// TestCapabilitiesPolicy: each function may do to the capabilities table
// and its latest index exactly what capability.DynamoRegistry does there
// (GetItem, BatchGetItem, Query of the index, UpdateItem, and
// TransactWriteItems of PutItem and UpdateItem to save), minus saving for
// the capability function: no Scan, no DeleteItem.
func TestCapabilitiesPolicy(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"ExecuteFunction":    {"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"},
		"CapabilityFunction": {"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"},
	}
	for _, st := range statements(tpl) {
		if strings.Contains(st.resource, "CapabilitiesTable") && !strings.Contains(st.resource, "/index/"+capability.LatestIndex) {
			t.Errorf("%s: a statement on the capabilities table without its %s index: %s", st.fn, capability.LatestIndex, st.resource)
		}
	}
	for id, got := range actionsOn(tpl, "CapabilitiesTable") {
		if !slices.Equal(got, want[id]) {
			t.Errorf("%s may %v on CapabilitiesTable; want exactly %v", id, got, want[id])
		}
	}
}

// grants returns what each function's policies allow on the resource
// whose long form is res (as JSON, e.g. {"Fn::GetAtt":"TracesTable.Arn"}),
// sorted; functions allowed nothing there are left out.
func grants(t *testing.T, tpl *template, res string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, st := range statements(tpl) {
		if st.resource == res {
			out[st.fn] = append(out[st.fn], st.actions...)
		}
	}
	for _, got := range out {
		slices.Sort(got)
	}
	return out
}

// methods are the IAM actions (service:Method) of an API interface's
// methods, sorted; transact maps an operation IAM does not know to the
// actions it is authorized as.
func methods(api reflect.Type, service string, transact map[string][]string) []string {
	var out []string
	for i := range api.NumMethod() {
		name := api.Method(i).Name
		if as, ok := transact[name]; ok {
			for _, a := range as {
				out = append(out, service+":"+a)
			}
			continue
		}
		out = append(out, service+":"+name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestTracesPolicies: on the traces table each function may do exactly
// what its code does — the execute function what tracedb's store does
// (write and read traces, no UpdateItem: it writes no counters), the
// capability function only write its runs' traces, the aggregator what
// aggregate.DynamoAPI does (its TransactWriteItems carry the ADDs'
// UpdateItem and the chunk marker's PutItem, which is how IAM authorizes
// them); only the aggregator reads the stream, with exactly the event
// source mapping's actions, and only it may send to its failure queue.
func TestTracesPolicies(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	table := grants(t, tpl, `{"Fn::GetAtt":"TracesTable.Arn"}`)
	want := map[string][]string{
		"ExecuteFunction":    methods(reflect.TypeFor[tracedb.DynamoAPI](), "dynamodb", nil),
		"CapabilityFunction": {"dynamodb:BatchWriteItem"},
		"AggregateFunction":  methods(reflect.TypeFor[aggregate.DynamoAPI](), "dynamodb", map[string][]string{"TransactWriteItems": {"PutItem", "UpdateItem"}}),
	}
	if fmt.Sprint(table) != fmt.Sprint(want) {
		t.Errorf("on the traces table the functions may\n%v\nwant\n%v", table, want)
	}
	stream := grants(t, tpl, `{"Fn::GetAtt":"TracesTable.StreamArn"}`)
	wantStream := map[string][]string{"AggregateFunction": {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"}}
	if fmt.Sprint(stream) != fmt.Sprint(wantStream) {
		t.Errorf("on the traces stream the functions may %v, want %v", stream, wantStream)
	}
	queue := grants(t, tpl, `{"Fn::GetAtt":"AggregateFailureQueue.Arn"}`)
	if want := map[string][]string{"AggregateFunction": {"sqs:SendMessage"}}; fmt.Sprint(queue) != fmt.Sprint(want) {
		t.Errorf("on the failure queue the functions may %v, want %v", queue, want)
	}
	// Nothing else: every statement of the aggregator is one of those.
	policies, _ := propertiesOf(tpl.resources["AggregateFunction"])["Policies"].([]any)
	if len(policies) != 1 {
		t.Fatalf("AggregateFunction has %d policies, want the one statement list", len(policies))
	}
	if sts, _ := policies[0].(map[string]any)["Statement"].([]any); len(sts) != 3 {
		t.Errorf("AggregateFunction has %d statements, want 3 (table, stream, queue)", len(sts))
	}
}

// TestAggregateStreamMapping pins the event source mapping the
// aggregator's exactly-once counting relies on (internal/aggregate): one
// batch per shard at a time, in order (ParallelizationFactor 1); failed
// batches retried, bisected, then described to the failure queue; every
// execution item written or rewritten delivered, and nothing the
// co-occurrence extractor ignores; no tumbling window or partial batch
// responses, which would deliver records the journals do not expect.
func TestAggregateStreamMapping(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	var mappings []string
	for id, r := range tpl.resources {
		if p := propertiesOf(r); typeOf(r) == "AWS::Lambda::EventSourceMapping" && strings.Contains(fmt.Sprint(p["EventSourceArn"]), "TracesTable") {
			mappings = append(mappings, id)
		}
	}
	if len(mappings) != 1 || mappings[0] != "AggregateStreamMapping" {
		t.Fatalf("mappings of the traces stream: %v, want AggregateStreamMapping alone", mappings)
	}
	p := propertiesOf(tpl.resources["AggregateStreamMapping"])
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	checks := []struct {
		prop string
		want string // JSON
	}{
		{"EventSourceArn", `{"Fn::GetAtt":"TracesTable.StreamArn"}`},
		{"FunctionName", `{"Ref":"AggregateFunction"}`},
		{"StartingPosition", `"TRIM_HORIZON"`},
		{"BatchSize", `1000`},
		{"MaximumBatchingWindowInSeconds", `5`},
		{"ParallelizationFactor", `1`},
		{"BisectBatchOnFunctionError", `true`},
		{"MaximumRetryAttempts", `10`},
		{"DestinationConfig", `{"OnFailure":{"Destination":{"Fn::GetAtt":"AggregateFailureQueue.Arn"}}}`},
		{"FunctionResponseTypes", `null`},
		{"TumblingWindowInSeconds", `null`},
	}
	for _, c := range checks {
		if got := js(p[c.prop]); got != c.want {
			t.Errorf("%s = %s, want %s", c.prop, got, c.want)
		}
	}
	filters, _ := p["FilterCriteria"].(map[string]any)["Filters"].([]any)
	if len(filters) != 1 {
		t.Fatalf("filters %v, want one", filters)
	}
	var pattern any
	if err := json.Unmarshal([]byte(filters[0].(map[string]any)["Pattern"].(string)), &pattern); err != nil {
		t.Fatal(err)
	}
	if got, want := js(pattern), `{"dynamodb":{"Keys":{"sk":{"S":["META"]}}},"eventName":["INSERT","MODIFY"]}`; got != want {
		t.Errorf("filter %s, want %s", got, want)
	}
}

// TestRoutesShareTheAuth: every route has the authorization of POST
// /execute — the resume route above all, since only the principal API
// Gateway verified may resume what it suspended — but the approval
// page's, which a browser reaches with no caller authorization at all
// (the page signs people in itself), and which are no more than those.
func TestRoutesShareTheAuth(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	auth := func(id string) string {
		p := propertiesOf(tpl.resources[id])
		b, _ := json.Marshal([]any{p["AuthorizationType"], p["AuthorizerId"]})
		return string(b)
	}
	want := auth("RouteExecute")
	if !strings.Contains(want, "AWS_IAM") || !strings.Contains(want, "JWT") {
		t.Fatalf("POST /execute's authorization %s does not follow AuthMode", want)
	}
	page := httpapi.PageRouteKeys()
	for id, r := range tpl.resources {
		if typeOf(r) != "AWS::ApiGatewayV2::Route" {
			continue
		}
		key, _ := propertiesOf(r)["RouteKey"].(string)
		switch {
		case slices.Contains(page, key) && auth(id) != `["NONE",null]`:
			t.Errorf("%s (%s, the approval page's): authorization %s, want NONE", id, key, auth(id))
		case !slices.Contains(page, key) && auth(id) != want:
			t.Errorf("%s: authorization %s, want /execute's %s", id, auth(id), want)
		}
	}
}

// policyStatement is one statement of a function's policies.
type policyStatement struct {
	fn       string   // the function's logical id
	cond     string   // the condition, for a statement in an Fn::If's true branch
	resource string   // its Resource, as JSON
	actions  []string // its Action, as a list
}

// statements lists every statement of every function's policies,
// including those a condition adds (the true branch of an Fn::If).
func statements(tpl *template) []policyStatement {
	var out []policyStatement
	for id, r := range tpl.resources {
		if typeOf(r) != "AWS::Serverless::Function" {
			continue
		}
		policies, _ := propertiesOf(r)["Policies"].([]any)
		for _, p := range policies {
			doc, _ := p.(map[string]any)
			cond := ""
			if branches, ok := doc["Fn::If"].([]any); ok && len(branches) == 3 {
				cond, _ = branches[0].(string)
				doc, _ = branches[1].(map[string]any)
			}
			sts, _ := doc["Statement"].([]any)
			for _, st := range sts {
				st, _ := st.(map[string]any)
				res, _ := json.Marshal(st["Resource"])
				out = append(out, policyStatement{fn: id, cond: cond, resource: string(res), actions: actionsOf(st["Action"])})
			}
		}
	}
	return out
}

// functions are the template's functions' logical ids.
func functions(tpl *template) []string {
	var out []string
	for id, r := range tpl.resources {
		if typeOf(r) == "AWS::Serverless::Function" {
			out = append(out, id)
		}
	}
	return out
}

// actionsOn lists, for every function, the actions its policies allow on
// a resource whose reference mentions resource, sorted (nil for none).
func actionsOn(tpl *template, resource string) map[string][]string {
	out := map[string][]string{}
	for _, id := range functions(tpl) {
		out[id] = nil
	}
	for _, st := range statements(tpl) {
		if strings.Contains(st.resource, resource) {
			out[st.fn] = append(out[st.fn], st.actions...)
		}
	}
	for _, got := range out {
		slices.Sort(got)
	}
	return out
}

// onlyExecuteMay fails unless the execute function may do exactly want
// on resource, and no other function anything.
func onlyExecuteMay(t *testing.T, tpl *template, resource string, want []string) {
	t.Helper()
	for id, got := range actionsOn(tpl, resource) {
		switch {
		case id == "ExecuteFunction" && !slices.Equal(got, want):
			t.Errorf("ExecuteFunction may %v on %s; it needs exactly %v", got, resource, want)
		case id != "ExecuteFunction" && len(got) > 0:
			t.Errorf("%s may %v on %s; only the execute function may", id, got, resource)
		}
	}
}

// TestSuspensionsPolicy: the execute function may do to the suspensions
// table exactly what internal/suspend's DynamoDB store and the journal of
// effects beside it do (the methods of suspend.DynamoAPI and
// journal.DynamoAPI), and no other function may touch it.
func TestSuspensionsPolicy(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	want := append(methods(reflect.TypeFor[suspend.DynamoAPI](), "dynamodb", nil), methods(reflect.TypeFor[journal.DynamoAPI](), "dynamodb", nil)...)
	slices.Sort(want)
	onlyExecuteMay(t, tpl, "SuspensionsTable", slices.Compact(want))
}

// TestApprovalPolicy: only the execute function reads the approval state
// key and announces suspensions, with exactly those actions; the key is
// generated so that it parses as a key; the function is told the caller
// decides nothing.
func TestApprovalPolicy(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	onlyExecuteMay(t, tpl, "ApprovalStateKey", []string{"secretsmanager:GetSecretValue"})
	onlyExecuteMay(t, tpl, "ApprovalBus", []string{"events:PutEvents"})
	gen, _ := propertiesOf(tpl.resources["ApprovalStateKey"])["GenerateSecretString"].(map[string]any)
	if gen["ExcludePunctuation"] != true || gen["IncludeSpace"] != false || fmt.Sprint(gen["PasswordLength"]) != "64" {
		t.Errorf("the approval key must be 64 letters and digits (the base64 of 48 bytes): %v", gen)
	}
	env, _ := propertiesOf(tpl.resources["ExecuteFunction"])["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	if vars["PML_CALLER_DECIDES"] != "off" || vars["PML_APPROVAL_KEY_SECRET"] == nil || vars["PML_APPROVAL_BUS"] == nil || vars["PML_APPROVERS"] == nil {
		t.Errorf("the execute function's approval settings: %v", vars)
	}
	// The approval page: its URL (the HTTP API's, whose routes serve it),
	// and who signs in to it.
	for _, name := range []string{app.EnvApprovalURL, app.EnvOIDCIssuer, app.EnvOIDCClientID, app.EnvOIDCSecretARN} {
		if vars[name] == nil {
			t.Errorf("the execute function is not given %s", name)
		}
	}
	if u, _ := json.Marshal(vars[app.EnvApprovalURL]); !strings.Contains(string(u), "${HttpApi}.execute-api") {
		t.Errorf("%s is %s; want the HTTP API's URL", app.EnvApprovalURL, u)
	}
	client := propertiesOf(tpl.resources["ApprovalUserPoolClient"])
	if b, _ := json.Marshal(client["CallbackURLs"]); client["GenerateSecret"] != false || !strings.Contains(string(b), "/approvals/signin/callback") ||
		fmt.Sprint(client["AllowedOAuthFlows"]) != "[code]" {
		t.Errorf("the approval page's app client: %v", client)
	}
	if pool := propertiesOf(tpl.resources["ApprovalUserPool"]); fmt.Sprint(pool["AdminCreateUserConfig"]) != "map[AllowAdminCreateUserOnly:true]" {
		t.Errorf("the approvers' user pool lets anyone sign up: %v", pool["AdminCreateUserConfig"])
	}
}

// TestSecretsPolicy: both functions may do to the MCP credential secrets
// exactly what oauthclient.SecretStore does (the methods of
// oauthclient.SecretsAPI), on exactly the secrets the McpCredentialSecrets
// parameter names and only when it names some; nothing else in the
// template touches Secrets Manager but the approval state key
// (TestApprovalPolicy) and the secrets the server list references
// (TestToolSecretsPolicy).
func TestSecretsPolicy(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	want := methods(reflect.TypeFor[oauthclient.SecretsAPI](), "secretsmanager", nil)
	got := map[string][]string{}
	for _, st := range statements(tpl) {
		touches := slices.ContainsFunc(st.actions, func(a string) bool { return strings.HasPrefix(a, "secretsmanager:") })
		if !touches || st.resource == `{"Ref":"ApprovalStateKey"}` || st.resource == `{"Ref":"ToolSecretArns"}` {
			// The approval state key is TestApprovalPolicy's, the
			// referenced secrets TestToolSecretsPolicy's.
			continue
		}
		if st.resource == `{"Ref":"ApprovalOidcClientSecretArn"}` {
			// The approval page's client secret: read by the execute
			// function alone, only when the parameter names one.
			if st.fn != "ExecuteFunction" || st.cond != "HasApprovalOidcSecret" || !slices.Equal(st.actions, []string{"secretsmanager:GetSecretValue"}) {
				t.Errorf("%s: %v on the approval page's client secret (condition %q); want the execute function's GetSecretValue, when it is set", st.fn, st.actions, st.cond)
			}
			continue
		}
		if conditional := st.cond == "HasMcpCredentialSecrets"; st.resource != `{"Ref":"McpCredentialSecrets"}` || !conditional {
			t.Errorf("%s: Secrets Manager actions %v on %s (conditional on HasMcpCredentialSecrets: %v); want them on exactly the McpCredentialSecrets parameter, only when it is set", st.fn, st.actions, st.resource, conditional)
		}
		got[st.fn] = append(got[st.fn], st.actions...)
	}
	for _, id := range functions(tpl) {
		slices.Sort(got[id])
		// Only the functions that call MCP servers hold their credentials.
		need := want
		if id != "ExecuteFunction" && id != "CapabilityFunction" {
			need = nil
		}
		if !slices.Equal(got[id], need) {
			t.Errorf("%s may %v on the MCP credential secrets; it needs exactly %v", id, got[id], need)
		}
	}
}

// TestToolSecretsPolicy: both functions that call tools may do to the
// secrets the server list references (${secret:…}) exactly what
// secretref.Resolver does (the methods of secretref.API: read, never
// write), on exactly what the ToolSecretArns parameter lists and only
// when it lists something; no other function may.
func TestToolSecretsPolicy(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	want := methods(reflect.TypeFor[secretref.API](), "secretsmanager", nil)
	got := map[string][]string{}
	for _, st := range statements(tpl) {
		if st.resource != `{"Ref":"ToolSecretArns"}` {
			continue
		}
		if st.cond != "HasToolSecrets" {
			t.Errorf("%s: %v on the referenced secrets with condition %q; want them only when ToolSecretArns lists some", st.fn, st.actions, st.cond)
		}
		got[st.fn] = append(got[st.fn], st.actions...)
	}
	for _, id := range functions(tpl) {
		slices.Sort(got[id])
		need := want
		if id != "ExecuteFunction" && id != "CapabilityFunction" {
			need = nil
		}
		if !slices.Equal(got[id], need) {
			t.Errorf("%s may %v on the referenced secrets; it needs exactly %v", id, got[id], need)
		}
	}
	if !slices.Equal(want, []string{"secretsmanager:GetSecretValue"}) {
		t.Errorf("secretref.API is %v: the template's ToolSecrets statement and docs/DEPLOY.md say GetSecretValue", want)
	}
}

func actionsOf(v any) []string {
	switch a := v.(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, x := range a {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}

// TestToolSourcePolicies: both functions that call tools may do to the
// Lambda functions offered as tools exactly what the Lambda kind does
// (lambdakind.API: InvokeFunction, ListTags), and call with SigV4 exactly
// the API Gateway endpoints the OpenAPI services sign for, on exactly what
// the ToolFunctionArns and ToolApiArns parameters list and only when they
// list something; no other Lambda function is reachable but the template's
// own.
func TestToolSourcePolicies(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	want := methods(reflect.TypeFor[lambdakind.API](), "lambda", map[string][]string{"Invoke": {"InvokeFunction"}})
	own := map[string]bool{
		`{"Fn::Sub":"arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-capability"}`: true,
	}
	got := map[string][]string{}
	apis := map[string]bool{}
	for _, st := range statements(tpl) {
		switch {
		case slices.ContainsFunc(st.actions, func(a string) bool { return strings.HasPrefix(a, "lambda:") }):
			if own[st.resource] {
				continue
			}
			if st.resource != `{"Ref":"ToolFunctionArns"}` || st.cond != "HasToolFunctions" {
				t.Errorf("%s: Lambda actions %v on %s (condition %q); want them on exactly the ToolFunctionArns parameter, only when it is set", st.fn, st.actions, st.resource, st.cond)
			}
			got[st.fn] = append(got[st.fn], st.actions...)
		case slices.ContainsFunc(st.actions, func(a string) bool { return strings.HasPrefix(a, "execute-api:") }):
			if st.resource != `{"Ref":"ToolApiArns"}` || st.cond != "HasToolApis" || !slices.Equal(st.actions, []string{"execute-api:Invoke"}) {
				t.Errorf("%s: %v on %s (condition %q); want execute-api:Invoke on exactly the ToolApiArns parameter", st.fn, st.actions, st.resource, st.cond)
			}
			apis[st.fn] = true
		}
	}
	for _, id := range functions(tpl) {
		slices.Sort(got[id])
		need := want
		if id != "ExecuteFunction" && id != "CapabilityFunction" {
			need = nil
		}
		if !slices.Equal(got[id], need) {
			t.Errorf("%s may %v on the tool functions; it needs exactly %v", id, got[id], need)
		}
		if apis[id] != (need != nil) {
			t.Errorf("%s may call the tool APIs: %v", id, apis[id])
		}
	}
}
