package lambdaevents_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/lambdaevents"
)

// A cookie whose Expires holds a comma: joined with others by commas it
// could no longer be told apart.
const (
	cookieA = "session=abc; Path=/; HttpOnly"
	cookieB = "pref=dark; Expires=Wed, 21 Oct 2026 07:28:00 GMT"
)

// headerEcho answers with two cookies and a two-valued Vary, and reports in
// its body the request headers and cookies it was given.
var headerEcho = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Set-Cookie", cookieA)
	w.Header().Add("Set-Cookie", cookieB)
	w.Header().Add("Vary", "Accept")
	w.Header().Add("Vary", "Origin")
	w.Header().Set("Content-Type", "application/json")
	var cookies []string
	for _, c := range r.Cookies() {
		cookies = append(cookies, c.Name+"="+c.Value)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"multi": r.Header.Values("X-Multi"), "cookies": cookies, "q": r.URL.Query()["q"]})
})

type echoed struct {
	Multi, Cookies, Q []string
}

func invokeEcho(t *testing.T, event any) any {
	t.Helper()
	payload, err := json.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	h := lambdaevents.Handler(lambdaevents.Options{HTTP: headerEcho})
	out, err := h(lambdaCtx(t), payload)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decodeEcho(t *testing.T, body string) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return e
}

// TestHTTPAPIv2Headers: cookies go both ways in payload 2.0's own fields,
// and other repeated headers survive joined with commas.
func TestHTTPAPIv2Headers(t *testing.T) {
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "GET /tools", RawPath: "/tools", RawQueryString: "q=1&q=2",
		Headers: map[string]string{"x-multi": "a,b"}, // as API Gateway joins them
		Cookies: []string{"a=1", "b=2"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			Stage: "$default", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: "/tools"},
		},
	}
	resp, ok := invokeEcho(t, ev).(events.APIGatewayV2HTTPResponse)
	if !ok {
		t.Fatal("not an HTTP API response")
	}
	if want := []string{cookieA, cookieB}; !slices.Equal(resp.Cookies, want) {
		t.Errorf("cookies %q; want %q", resp.Cookies, want)
	}
	if v, ok := resp.Headers["Set-Cookie"]; ok {
		t.Errorf("Set-Cookie also in headers: %q", v)
	}
	if got := resp.Headers["Vary"]; got != "Accept, Origin" {
		t.Errorf("Vary %q; want both values", got)
	}
	e := decodeEcho(t, resp.Body)
	if !slices.Equal(e.Cookies, []string{"a=1", "b=2"}) || !slices.Equal(e.Multi, []string{"a,b"}) || !slices.Equal(e.Q, []string{"1", "2"}) {
		t.Errorf("the handler saw %+v", e)
	}
}

// TestRESTAPIv1Headers: every value of a repeated header reaches the
// handler, and every value of its response headers reaches API Gateway.
func TestRESTAPIv1Headers(t *testing.T) {
	ev := events.APIGatewayProxyRequest{
		HTTPMethod: "GET", Path: "/tools", Resource: "/tools",
		Headers:                         map[string]string{"X-Multi": "b", "Cookie": "a=1; b=2"},
		MultiValueHeaders:               map[string][]string{"X-Multi": {"a", "b"}, "Cookie": {"a=1; b=2"}},
		QueryStringParameters:           map[string]string{"q": "2"},
		MultiValueQueryStringParameters: map[string][]string{"q": {"1", "2"}},
		RequestContext:                  events.APIGatewayProxyRequestContext{Stage: "prod"},
	}
	resp, ok := invokeEcho(t, ev).(events.APIGatewayProxyResponse)
	if !ok {
		t.Fatal("not a REST API response")
	}
	if got, want := resp.MultiValueHeaders["Set-Cookie"], []string{cookieA, cookieB}; !slices.Equal(got, want) {
		t.Errorf("Set-Cookie %q; want %q", got, want)
	}
	if got := resp.MultiValueHeaders["Vary"]; !slices.Equal(got, []string{"Accept", "Origin"}) {
		t.Errorf("Vary %q; want both values", got)
	}
	if resp.Headers["Content-Type"] != "application/json" {
		t.Errorf("single-value headers %v", resp.Headers)
	}
	e := decodeEcho(t, resp.Body)
	if !slices.Equal(e.Cookies, []string{"a=1", "b=2"}) || !slices.Equal(e.Multi, []string{"a", "b"}) || !slices.Equal(e.Q, []string{"1", "2"}) {
		t.Errorf("the handler saw %+v", e)
	}
}
