package execution

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

// decoded reports whether a decoder's answer is to be checked further:
// it fails the test when ferr is not the INVALID_REQUEST saying want
// (want "": when there is any error).
func decoded(t *testing.T, ferr *fault.Error, want string) bool {
	t.Helper()
	if want == "" {
		if ferr != nil {
			t.Fatal(ferr)
		}
		return true
	}
	if ferr == nil || ferr.Code != fault.InvalidRequest || !strings.Contains(ferr.Message, want) {
		t.Fatalf("got %+v, want INVALID_REQUEST saying %q", ferr, want)
	}
	return false
}

// TestDecode holds the one decoder every front end uses to every field of
// an execute request, and to what each front end gets by default.
func TestDecode(t *testing.T) {
	all := `{"code": "return 1", "lang": "ts", "args": {"n": [1, 2]}, "tools": ["demo:*", "kv:get_*"], "timeout_ms": 500,
		"allow_destructive": true, "parse_json_text": true, "call_detail": "summary", "approval": "suspend"}`
	tests := []struct {
		name string
		body string
		src  Source
		want Request // compared field by field, with the filter's patterns
		err  string  // in the INVALID_REQUEST's message
	}{
		{name: "every field", body: all, src: SourceHTTP,
			want: Request{Code: "return 1", Lang: LangTS, Args: json.RawMessage(`{"n": [1, 2]}`), Tools: []string{"demo:*", "kv:get_*"},
				TimeoutMS: 500, AllowDestructive: true, ParseJSONText: true, CallDetail: CallDetailSummary, Approval: ApprovalSuspend, Source: SourceHTTP}},
		{name: "code only", body: `{"code": "return 1"}`, src: SourceHTTP, want: Request{Code: "return 1", Source: SourceHTTP}},
		{name: "mcp", body: `{"code": "return 1", "approval": "suspend"}`, src: SourceMCP, want: Request{Code: "return 1", Approval: ApprovalSuspend, Source: SourceMCP}},
		{name: "direct invoke may suspend", body: `{"code": "return 1", "approval": "suspend"}`, src: SourceInvoke, want: Request{Code: "return 1", Approval: ApprovalSuspend, Source: SourceInvoke}},
		{name: "sqs", body: `{"code": "return 1", "approval": "refuse"}`, src: SourceSQS, want: Request{Code: "return 1", Approval: ApprovalRefuse, Source: SourceSQS}},
		{name: "sqs may ask to suspend (CheckQueued decides)", body: `{"code": "return 1", "approval": "suspend"}`, src: SourceSQS, want: Request{Code: "return 1", Approval: ApprovalSuspend, Source: SourceSQS}},
		{name: "lang js", body: `{"code": "return 1", "lang": "js"}`, src: SourceHTTP, want: Request{Code: "return 1", Lang: LangJS, Source: SourceHTTP}},
		{name: "async", body: `{"code": "return 1", "async": true}`, src: SourceHTTP, want: Request{Code: "return 1", Async: true, Source: SourceHTTP}},
		{name: "async from a queue", body: `{"code": "return 1", "async": true}`, src: SourceSQS, err: "async is for callers that poll"},
		{name: "async from an event rule", body: `{"code": "return 1", "async": true}`, src: SourceEventBridge, err: "async is for callers that poll"},
		{name: "null args", body: `{"code": "return 1", "args": null}`, src: SourceHTTP, want: Request{Code: "return 1", Args: json.RawMessage("null"), Source: SourceHTTP}},
		{name: "pinned capabilities", body: `{"code": "return 1", "capabilities": {"math:sum": 2, "a-b:c_d": 1}}`, src: SourceHTTP,
			want: Request{Code: "return 1", Capabilities: map[string]int{"math:sum": 2, "a-b:c_d": 1}, Source: SourceHTTP}},
		{name: "a pin to version 0", body: `{"code": "x", "capabilities": {"math:sum": 0}}`, src: SourceHTTP, err: "versions start at 1"},
		{name: "a pin to no capability name", body: `{"code": "x", "capabilities": {"sum": 1}}`, src: SourceHTTP, err: "not a capability name"},
		{name: "a pin to a reserved name", body: `{"code": "x", "capabilities": {"then:x": 1}}`, src: SourceHTTP, err: "not a capability name"},
		{name: "a pin not a number", body: `{"code": "x", "capabilities": {"math:sum": "2"}}`, src: SourceHTTP, err: "capabilities"},
		{name: "a pin not an integer", body: `{"code": "x", "capabilities": {"math:sum": 2.5}}`, src: SourceHTTP, err: "capabilities"},
		{name: "too many pins", body: `{"code": "x", "capabilities": {` + manyPins(MaxPins+1) + `}}`, src: SourceHTTP, err: "at most 100"},
		{name: "a new session", body: `{"code": "const x = 1", "session": "new", "session_ttl_s": 600}`, src: SourceMCP, want: Request{Code: "const x = 1", Session: SessionNew, SessionTTLS: 600, Source: SourceMCP}},
		{name: "a session continued", body: `{"code": "return x", "session_id": "ss_abc-1_Z"}`, src: SourceSQS, want: Request{Code: "return x", SessionID: "ss_abc-1_Z", Source: SourceSQS}},
		{name: "a session continued asynchronously", body: `{"code": "return x", "session_id": "ss_a", "async": true}`, src: SourceHTTP, want: Request{Code: "return x", SessionID: "ss_a", Async: true, Source: SourceHTTP}},
		{name: "session other than new", body: `{"code": "x", "session": "ss_abc"}`, src: SourceHTTP, err: `session must be "new"`},
		{name: "session and session_id", body: `{"code": "x", "session": "new", "session_id": "ss_a"}`, src: SourceHTTP, err: "exclude each other"},
		{name: "a session id that is not one", body: `{"code": "x", "session_id": "../etc"}`, src: SourceHTTP, err: "not a session id"},
		{name: "a session id too long", body: `{"code": "x", "session_id": "ss_` + strings.Repeat("a", 65) + `"}`, src: SourceHTTP, err: "not a session id"},
		{name: "a ttl past a day", body: `{"code": "x", "session": "new", "session_ttl_s": 86401}`, src: SourceHTTP, err: "session_ttl_s"},
		{name: "a ttl without a new session", body: `{"code": "x", "session_id": "ss_a", "session_ttl_s": 60}`, src: SourceHTTP, err: "session_ttl_s"},
		{name: "a new session nobody is told of", body: `{"code": "x", "session": "new"}`, src: SourceEventBridge, err: "needs a caller that reads the answer"},
		{name: "a new session started asynchronously", body: `{"code": "x", "session": "new", "async": true}`, src: SourceHTTP, err: "needs a caller that reads the answer"},
		{name: "a session's execution may wait for a person", body: `{"code": "x", "session_id": "ss_a", "approval": "suspend"}`, src: SourceHTTP, want: Request{Code: "x", SessionID: "ss_a", Approval: ApprovalSuspend, Source: SourceHTTP}},

		{name: "no code", body: `{"lang": "js"}`, src: SourceHTTP, err: "code is missing"},
		{name: "blank code", body: `{"code": " \n "}`, src: SourceHTTP, err: "code is missing"},
		{name: "negative timeout", body: `{"code": "x", "timeout_ms": -1}`, src: SourceHTTP, err: "timeout_ms"},
		{name: "bad lang", body: `{"code": "x", "lang": "python"}`, src: SourceHTTP, err: "lang"},
		{name: "bad call detail", body: `{"code": "x", "call_detail": "all"}`, src: SourceHTTP, err: "call_detail"},
		{name: "bad approval", body: `{"code": "x", "approval": "ask"}`, src: SourceHTTP, err: "approval"},
		{name: "bad tools pattern", body: `{"code": "x", "tools": ["nocolon"]}`, src: SourceHTTP, err: "tools filter"},
		{name: "tools not a list", body: `{"code": "x", "tools": "demo:*"}`, src: SourceHTTP, err: "tools"},
		{name: "timeout not a number", body: `{"code": "x", "timeout_ms": "5"}`, src: SourceHTTP, err: "timeout_ms"},

		// Strictness: the names a proxy or a WAF rule sees are the names
		// the service reads.
		{name: "a field in another case", body: `{"code": "x", "ALLOW_DESTRUCTIVE": true}`, src: SourceHTTP, err: `unknown field "ALLOW_DESTRUCTIVE" (field names are exact: "allow_destructive")`},
		{name: "a field in title case", body: `{"Code": "x"}`, src: SourceHTTP, err: `field names are exact: "code"`},
		{name: "a repeated field", body: `{"code": "return 1", "code": "return 2"}`, src: SourceHTTP, err: "duplicate"},
		{name: "an unknown field", body: `{"code": "x", "timeout": 5}`, src: SourceHTTP, err: `unknown field "timeout"`},
		{name: "a host-only field", body: `{"code": "x", "principal": "arn:aws:iam::1:root"}`, src: SourceHTTP, err: `unknown field "principal"`},
		{name: "another host-only field", body: `{"code": "x", "ExecutionID": "ex_mine"}`, src: SourceHTTP, err: "unknown field"},
		{name: "data after the object", body: `{"code": "x"} {"code": "y"}`, src: SourceHTTP, err: "data after the JSON value"},
		{name: "not an object", body: `["x"]`, src: SourceHTTP, err: "not an execute request"},
		{name: "not JSON", body: `code=x`, src: SourceHTTP, err: "not an execute request"},
		{name: "invalid UTF-8", body: "{\"code\": \"\xff\"}", src: SourceHTTP, err: "not an execute request"},
		{name: "args nested past the decoder's bound", body: `{"code": "x", "args": ` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, src: SourceHTTP, err: "depth"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ferr := Decode([]byte(tc.body), tc.src)
			if !decoded(t, ferr, tc.err) {
				return
			}
			if !got.Validated() {
				t.Error("a decoded request is validated")
			}
			if patterns := strings.Join(got.Filter().Patterns(), ","); patterns != strings.Join(tc.want.Tools, ",") {
				t.Errorf("filter %q, want the tools %q parsed", patterns, tc.want.Tools)
			}
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(tc.want)
			if string(a) != string(b) || got.Source != tc.want.Source || got.ExecutionID != "" || got.Principal != "" || got.Parent != nil {
				t.Fatalf("got %s (source %q), want %s (source %q)", a, got.Source, b, tc.want.Source)
			}
		})
	}
}

// TestValidate is the same rules for the front ends that build a request
// themselves: the CLI from its flags, a capability run from its invocation.
func TestValidate(t *testing.T) {
	cli := Request{Code: "return 1", Lang: LangTS, TimeoutMS: 30000, CallDetail: CallDetailFull, Approval: ApprovalRefuse,
		Tools: []string{"demo:*"}, Source: SourceCLI}
	if ferr := cli.Validate(); ferr != nil || !cli.Filter().Allows("demo", "echo") || cli.Filter().Allows("kv", "get") {
		t.Fatalf("cli: %v, filter %v", ferr, cli.Filter().Patterns())
	}
	for _, bad := range []Request{
		{Code: "x", Tools: []string{"a:b:c"}, Source: SourceCLI},
		{Code: "x", Args: json.RawMessage("{"), Source: SourceCLI},
		{Code: "", Source: SourceCLI},
	} {
		if ferr := bad.Validate(); ferr == nil || ferr.Code != fault.InvalidRequest || bad.Validated() {
			t.Errorf("%+v: %v, want INVALID_REQUEST", bad, ferr)
		}
	}

	narrowing, err := ParseNarrowing([][]string{{"demo:*"}})
	if err != nil {
		t.Fatal(err)
	}
	inv := Invocation{Parent: Parent{Lineage: Lineage{ExecutionID: "ex_p", CallID: 3, Chain: []string{"a:b"}, Narrowing: narrowing,
		TraceHeader: "Root=1-x", Approval: ApprovalSuspend, AllowDestructive: true}, Capability: "c:d", Sandboxes: 5},
		Version: 2, Args: json.RawMessage(`{"x": 1}`), TimeoutMS: 700}
	child, ferr := inv.Request("return args.x")
	if ferr != nil {
		t.Fatal(ferr)
	}
	if child.Source != SourceCapability || !child.AllowDestructive || child.Approval != ApprovalSuspend || child.TraceHeader != "Root=1-x" ||
		child.TimeoutMS != 700 || string(child.Args) != `{"x": 1}` || child.Parent == nil || child.Parent.Depth() != 2 ||
		strings.Join(child.Parent.Path(), ">") != "a:b>c:d" || len(child.Inherited()) != 1 || !child.Validated() {
		t.Fatalf("capability run: %+v", child)
	}
}

// TestCallLineage: a call's lineage is what the run it starts inherits —
// the chain down to the caller, every narrowing including the caller's own
// (parsed once, never again), the trace header, the approval mode, and
// whether the call was consented to.
func TestCallLineage(t *testing.T) {
	root, ferr := Decode([]byte(`{"code": "x", "tools": ["c:*", "demo:echo"], "approval": "suspend"}`), SourceHTTP)
	if ferr != nil {
		t.Fatal(ferr)
	}
	root.ExecutionID, root.TraceHeader = "ex_root", "Root=1-a"
	l := root.CallLineage(4, false)
	if l.ExecutionID != "ex_root" || l.CallID != 4 || l.Depth() != 0 || len(l.Narrowing) != 1 || l.AllowDestructive ||
		l.Approval != ApprovalSuspend || l.TraceHeader != "Root=1-a" {
		t.Fatalf("root call: %+v", l)
	}
	if !root.CallLineage(4, true).AllowDestructive {
		t.Fatal("a consented call may do what needs approval")
	}

	child, ferr := Invocation{Parent: Parent{Lineage: l, Capability: "c:x", Sandboxes: 3}}.Request("return 1")
	if ferr != nil {
		t.Fatal(ferr)
	}
	child.ExecutionID = "ex_child"
	grand := child.CallLineage(1, false)
	if grand.Depth() != 1 || grand.Chain[0] != "c:x" || len(grand.Narrowing) != 1 || grand.ExecutionID != "ex_child" {
		t.Fatalf("child call: %+v", grand)
	}
	// A child that narrows adds its own; the parent's list is not written.
	narrowed := child
	if ferr := narrowed.SetTools([]string{"demo:echo"}); ferr != nil {
		t.Fatal(ferr)
	}
	if got := narrowed.CallLineage(1, false).Narrowing; len(got) != 2 || len(l.Narrowing) != 1 {
		t.Fatalf("narrowings %v (parent's %v)", got.Patterns(), l.Narrowing.Patterns())
	}
	// Through JSON (the capability function's payload) nothing is lost.
	raw, err := json.Marshal(Invocation{Parent: Parent{Lineage: grand, Capability: "c:y", Sandboxes: 1}, Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	back, ferr := DecodeInvocation(raw)
	if ferr != nil {
		t.Fatalf("%s: %v", raw, ferr)
	}
	if a, _ := json.Marshal(back); string(a) != string(raw) {
		t.Fatalf("round trip:\n%s\n%s", raw, a)
	}
	if !back.Parent.Narrowing.Allows("demo", "echo") || back.Parent.Narrowing.Allows("demo", "add") {
		t.Fatalf("narrowing after the round trip: %v", back.Parent.Narrowing.Patterns())
	}
}

// manyPins is n pins as JSON members.
func manyPins(n int) string {
	m := make([]string, n)
	for i := range m {
		m[i] = fmt.Sprintf(`"p:c%d": 1`, i)
	}
	return strings.Join(m, ", ")
}

// TestPins: a run's calls run what the runs above it pinned, then its
// own pins; the outermost pin of a name wins, and none is lost through
// the capability function's payload.
func TestPins(t *testing.T) {
	root, ferr := Decode([]byte(`{"code": "x", "capabilities": {"math:sum": 1}}`), SourceHTTP)
	if ferr != nil {
		t.Fatal(ferr)
	}
	l := root.CallLineage(1, false)
	if len(l.Pins) != 1 || l.Pins["math:sum"] != 1 {
		t.Fatalf("root call pins %v", l.Pins)
	}
	child, ferr := Invocation{Parent: Parent{Lineage: l, Capability: "app:x"}}.Request("return 1")
	if ferr != nil {
		t.Fatal(ferr)
	}
	// The capability's own pins: math:sum is its caller's to say.
	child.Capabilities = map[string]int{"math:sum": 3, "math:max": 2}
	got := child.CallLineage(1, false).Pins
	if len(got) != 2 || got["math:sum"] != 1 || got["math:max"] != 2 || len(l.Pins) != 1 {
		t.Fatalf("child call pins %v (the root's %v)", got, l.Pins)
	}
	raw, _ := json.Marshal(Invocation{Parent: Parent{Lineage: child.CallLineage(1, false), Capability: "math:max"}, Version: 2})
	back, ferr := DecodeInvocation(raw)
	if ferr != nil || back.Parent.Pins["math:sum"] != 1 || back.Parent.Pins["math:max"] != 2 {
		t.Fatalf("through the payload: %+v %v", back.Parent.Pins, ferr)
	}
	if unpinned, _ := Decode([]byte(`{"code": "x"}`), SourceHTTP); unpinned.CallLineage(1, false).Pins != nil {
		t.Fatal("an unpinned request pins something")
	}
}

// TestCheckQueued: a queued front end may suspend only where suspensions
// are announced to someone who can decide.
func TestCheckQueued(t *testing.T) {
	for _, tc := range []struct {
		src      Source
		approval string
		notified bool
		refused  bool
	}{
		{SourceSQS, ApprovalSuspend, false, true},
		{SourceEventBridge, ApprovalSuspend, false, true},
		{SourceSQS, ApprovalSuspend, true, false},
		{SourceSQS, ApprovalRefuse, false, false},
		{SourceHTTP, ApprovalSuspend, false, false},
		{SourceInvoke, ApprovalSuspend, false, false},
	} {
		r := Request{Code: "x", Approval: tc.approval, Source: tc.src}
		ferr := r.CheckQueued(tc.notified)
		if (ferr != nil) != tc.refused || (ferr != nil && (ferr.Code != fault.InvalidRequest || !strings.Contains(ferr.Message, string(tc.src)))) {
			t.Errorf("%s %s notified=%v: %v", tc.src, tc.approval, tc.notified, ferr)
		}
	}
}
