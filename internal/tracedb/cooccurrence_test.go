package tracedb

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/trace"
)

func toolList(tools ...string) events.DynamoDBAttributeValue {
	l := make([]events.DynamoDBAttributeValue, len(tools))
	for i, t := range tools {
		l[i] = events.NewStringAttribute(t)
	}
	return events.NewListAttribute(l)
}

func execRecord(name, pk, sk string, oldTools, newTools *events.DynamoDBAttributeValue) events.DynamoDBEventRecord {
	r := events.DynamoDBEventRecord{EventID: "e1", EventName: name, Change: events.DynamoDBStreamRecord{
		Keys: map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute(pk), "sk": events.NewStringAttribute(sk)},
	}}
	if newTools != nil {
		r.Change.NewImage = map[string]events.DynamoDBAttributeValue{"tools": *newTools}
	}
	if oldTools != nil {
		r.Change.OldImage = map[string]events.DynamoDBAttributeValue{"tools": *oldTools}
	}
	return r
}

func ptr(v events.DynamoDBAttributeValue) *events.DynamoDBAttributeValue { return &v }

func TestCoOccurrence(t *testing.T) {
	many := make([]string, MaxCountedTools+1)
	for i := range many {
		many[i] = fmt.Sprintf("s:t%02d", i)
	}
	tests := []struct {
		name    string
		rec     events.DynamoDBEventRecord
		want    string // the increments, "tool>other" sorted; "error" for a malformed record
		wantErr bool
	}{
		{"a new execution counts each ordered pair",
			execRecord("INSERT", "EXEC#ex_1", "META", nil, ptr(toolList("a:x", "b:y", "c:z"))),
			"a:x>b:y a:x>c:z b:y>a:x b:y>c:z c:z>a:x c:z>b:y", false},
		{"one tool counts nothing", execRecord("INSERT", "EXEC#ex_1", "META", nil, ptr(toolList("a:x"))), "", false},
		{"no tools attribute counts nothing", execRecord("INSERT", "EXEC#ex_1", "META", nil, nil), "", false},
		{"a resumed execution counts only the pairs it gained",
			execRecord("MODIFY", "EXEC#ex_1", "META", ptr(toolList("a:x", "b:y")), ptr(toolList("a:x", "b:y", "c:z"))),
			"a:x>c:z b:y>c:z c:z>a:x c:z>b:y", false},
		{"rewritten with the same tools counts nothing",
			execRecord("MODIFY", "EXEC#ex_1", "META", ptr(toolList("a:x", "b:y")), ptr(toolList("a:x", "b:y"))), "", false},
		{"a deletion (TTL) counts nothing", execRecord("REMOVE", "EXEC#ex_1", "META", ptr(toolList("a:x", "b:y")), nil), "", false},
		{"a call item counts nothing", execRecord("INSERT", "EXEC#ex_1", "CALL#000001", nil, ptr(toolList("a:x", "b:y"))), "", false},
		{"a counter item counts nothing", execRecord("INSERT", "TOOL#a:x", "WITH#b:y", nil, ptr(toolList("a:x", "b:y"))), "", false},
		{"the aggregator's own items count nothing", execRecord("INSERT", "AGG#e9", "HEAD", nil, ptr(toolList("a:x", "b:y"))), "", false},
		{"tools not a list", execRecord("INSERT", "EXEC#ex_1", "META", nil, ptr(events.NewStringAttribute("a:x"))), "", true},
		{"a tool not a string", execRecord("INSERT", "EXEC#ex_1", "META", nil,
			ptr(events.NewListAttribute([]events.DynamoDBAttributeValue{events.NewNumberAttribute("1"), events.NewStringAttribute("a:x")}))), "", true},
		{"an empty tool", execRecord("INSERT", "EXEC#ex_1", "META", nil, ptr(toolList("a:x", ""))), "", true},
		{"a tool twice", execRecord("INSERT", "EXEC#ex_1", "META", nil, ptr(toolList("a:x", "a:x"))), "", true},
		{"more tools than are counted", execRecord("INSERT", "EXEC#ex_1", "META", nil, ptr(toolList(many...))), "", true},
		{"a malformed old image", execRecord("MODIFY", "EXEC#ex_1", "META", ptr(events.NewMapAttribute(nil)), ptr(toolList("a:x", "b:y"))), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			incs, err := CoOccurrence(tt.rec)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			var got []string
			for _, inc := range incs {
				if inc.N != 1 || inc.PK != "TOOL#"+inc.Labels["tool"] || inc.SK != "WITH#"+inc.Labels["other"] {
					t.Errorf("increment %+v", inc)
				}
				got = append(got, inc.Labels["tool"]+">"+inc.Labels["other"])
			}
			slices.Sort(got)
			if strings.Join(got, " ") != tt.want {
				t.Errorf("counted %q, want %q", strings.Join(got, " "), tt.want)
			}
		})
	}
}

// TestCountedTools: built-ins do not count, each tool counts once, and
// past MaxCountedTools only the first tools called count — by call id,
// whatever order the calls are recorded in.
func TestCountedTools(t *testing.T) {
	var calls []trace.Call
	for i := range 100 {
		calls = append(calls, trace.Call{CallID: 100 - i, Server: "s", Tool: fmt.Sprintf("t%03d", 100-i)})
	}
	calls = append(calls, trace.Call{CallID: 101, Tool: "tools.search"}, trace.Call{CallID: 102, Server: "s", Tool: "t001"})
	got := countedTools(calls)
	if len(got) != MaxCountedTools || got[0] != "s:t001" || got[MaxCountedTools-1] != fmt.Sprintf("s:t%03d", MaxCountedTools) {
		t.Fatalf("counted %v", got)
	}
}
