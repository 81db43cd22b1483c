package samcheck

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/pml-sandbox/pml/internal/httpapi"
)

// templateDoc is the whole template, intrinsics in their long form.
func templateDoc(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestStreamingAPI pins the streaming front: a regional REST API with
// exactly the routes internal/httpapi serves, each a Lambda proxy
// integration that streams (responseTransferMode STREAM, through the
// function's response-streaming-invocations) and waits 15 minutes — at
// least as long as the execute function may run — each with the same
// authorization, which follows AuthMode (SigV4, the authorize function's
// JWT, or none); the execute function told its REST API streams; the HTTP
// API's integration kept at its 30 s.
func TestStreamingAPI(t *testing.T) {
	doc := templateDoc(t)
	res, _ := doc["Resources"].(map[string]any)
	params, _ := doc["Parameters"].(map[string]any)
	api := res["StreamApi"]
	if typeOf(api) != "AWS::Serverless::Api" {
		t.Fatalf("StreamApi is %q", typeOf(api))
	}
	props := propertiesOf(api)
	if jsonOf(props["EndpointConfiguration"]) != `{"Type":"REGIONAL"}` {
		t.Errorf("endpoint %s: want REGIONAL (a streamed response's idle timeout is 5 minutes there, 30 s at the edge)", jsonOf(props["EndpointConfiguration"]))
	}
	body, _ := props["DefinitionBody"].(map[string]any)
	paths, _ := body["paths"].(map[string]any)
	maxTimeout, _ := params["ExecuteTimeout"].(map[string]any)["MaxValue"].(float64)
	if maxTimeout != 900 {
		t.Errorf("ExecuteTimeout's MaxValue %v: Lambda's longest is 900", maxTimeout)
	}
	var routes []string
	security := ""
	for path, ms := range paths {
		for verb, m := range ms.(map[string]any) {
			route := strings.ToUpper(verb) + " " + path
			routes = append(routes, route)
			op, _ := m.(map[string]any)
			in, _ := op["x-amazon-apigateway-integration"].(map[string]any)
			uri := jsonOf(in["uri"])
			if in["type"] != "aws_proxy" || in["httpMethod"] != "POST" || in["responseTransferMode"] != "STREAM" ||
				!strings.Contains(uri, "lambda:path/2021-11-15/functions/${ExecuteFunction.Arn}/response-streaming-invocations") {
				t.Errorf("%s: integration %s, want a streaming Lambda proxy integration of the execute function", route, jsonOf(in))
			}
			if ms, _ := in["timeoutInMillis"].(float64); ms != 900000 || ms < maxTimeout*1000 {
				t.Errorf("%s: timeoutInMillis %v, want 900000 (15 minutes, the most a stream and the function may take)", route, in["timeoutInMillis"])
			}
			s := jsonOf(op["security"])
			if slices.Contains(httpapi.PageRouteKeys(), route) {
				// The approval page's: a browser's, signed in by the page.
				if s != "[]" {
					t.Errorf("%s: security %s, want none (the approval page signs people in itself)", route, s)
				}
				continue
			}
			if security == "" {
				security = s
			}
			if s != security {
				t.Errorf("%s: security %s, want every route's %s", route, s, security)
			}
		}
	}
	slices.Sort(routes)
	if want := slices.Sorted(slices.Values(httpapi.RouteKeys())); !slices.Equal(routes, want) {
		t.Errorf("REST API routes %v; want %v", routes, want)
	}
	if want := `{"Fn::If":["UseIam",[{"sigv4":[]}],{"Fn::If":["UseJwt",[{"jwt":[]}],[]]}]}`; security != want {
		t.Errorf("security %s, want %s", security, want)
	}
	schemes := jsonOf(body["components"])
	for _, want := range []string{`"x-amazon-apigateway-authtype":"awsSigv4"`, `"type":"token"`, "${AuthorizeFunction.Arn}", `"Fn::If":["UseJwt"`} {
		if !strings.Contains(schemes, want) {
			t.Errorf("security schemes %s lack %s", schemes, want)
		}
	}
	// The HTTP API stays buffered and waits its 30 s.
	if in := propertiesOf(res["HttpApiIntegration"]); in["TimeoutInMillis"] != 30000.0 || in["PayloadFormatVersion"] != "2.0" {
		t.Errorf("HTTP API integration %s", jsonOf(in))
	}
	env, _ := propertiesOf(res["ExecuteFunction"])["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	if vars["PML_STREAM_REST_API"] != "on" {
		t.Errorf("the execute function is not told its REST API streams: %v", vars["PML_STREAM_REST_API"])
	}
	// The authorizer exists with JWT only, reads its issuer and audiences,
	// and may do nothing but be invoked by this API's authorizers.
	az := res["AuthorizeFunction"].(map[string]any)
	azEnv, _ := propertiesOf(az)["Environment"].(map[string]any)
	if az["Condition"] != "UseJwt" || propertiesOf(az)["Policies"] != nil || jsonOf(azEnv) != `{"Variables":{"PML_JWT_AUDIENCE":{"Ref":"JwtAudience"},"PML_JWT_ISSUER":{"Ref":"JwtIssuer"}}}` {
		t.Errorf("AuthorizeFunction %s", jsonOf(az))
	}
	if p := propertiesOf(res["AuthorizeInvokePermission"]); !strings.Contains(jsonOf(p["SourceArn"]), "${StreamApi}/authorizers/*") {
		t.Errorf("the authorizer may be invoked by %s", jsonOf(p["SourceArn"]))
	}
	if p := propertiesOf(res["StreamApiInvokePermission"]); p["Principal"] != "apigateway.amazonaws.com" || !strings.Contains(jsonOf(p["SourceArn"]), "${StreamApi}/*") {
		t.Errorf("the REST API's permission %s", jsonOf(p))
	}
}

// TestSelfInvokePolicy: the execute function may invoke itself (an
// asynchronous execution's run), through a policy of its own, and nothing
// else through it.
func TestSelfInvokePolicy(t *testing.T) {
	res, _ := templateDoc(t)["Resources"].(map[string]any)
	p := propertiesOf(res["ExecuteSelfInvokePolicy"])
	want := `{"Statement":[{"Action":"lambda:InvokeFunction","Effect":"Allow","Resource":{"Fn::GetAtt":"ExecuteFunction.Arn"},"Sid":"InvokeSelfOnly"}],"Version":"2012-10-17"}`
	if got := jsonOf(p["PolicyDocument"]); got != want {
		t.Errorf("policy %s, want %s", got, want)
	}
	if jsonOf(p["Roles"]) != `[{"Ref":"ExecuteFunctionRole"}]` {
		t.Errorf("attached to %s", jsonOf(p["Roles"]))
	}
}
