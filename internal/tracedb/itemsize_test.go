package tracedb

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// itemSize is an item's size as DynamoDB counts it for billing: each
// attribute's name in UTF-8 bytes plus its value — a string's UTF-8 bytes,
// a number's one byte per two significant digits plus one, one byte for a
// boolean or null.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			digits := strings.Trim(strings.NewReplacer("-", "", ".", "").Replace(v.Value), "0")
			n += (len(digits)+1)/2 + 1
		case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
			n++
		case *types.AttributeValueMemberL:
			n += 3 // the list's own overhead
			for _, x := range v.Value {
				n += 1 + itemSize(map[string]types.AttributeValue{"": x}) // one byte per element
			}
		default:
			n += 1 << 20 // an attribute type the items do not use: fail the bound
		}
	}
	return n
}

// longTools is MaxCountedTools distinct tool names of the longest length.
func longTools(server, tool string) []string {
	out := make([]string, MaxCountedTools)
	for i := range out {
		out[i] = fmt.Sprintf("%s:%s%02d", server, tool[2:], i)
	}
	return out
}

// writeUnits is what writing an item costs on an on-demand table: one
// write request unit per 1 KB, rounded up.
func writeUnits(size int) int { return (size + 1023) / 1024 }

// TestItemWriteUnits keeps the cost model of docs/DEPLOY.md true: every
// trace item of a realistic execution (names of a few dozen characters)
// costs one DynamoDB write unit, and even at the longest names accepted
// (catalog.MaxNameLen, ASCII) none costs more than two.
func TestItemWriteUnits(t *testing.T) {
	start := time.Date(2026, 11, 23, 12, 34, 56, 123456789, time.UTC)
	exp := start.Add(30 * 24 * time.Hour).Unix()
	const id, child = "ex_0123456789abcdef01234567", "ex_89abcdef0123456789abcdef"
	hash := strings.Repeat("a", 64)
	long := func(c string) string { return strings.Repeat(c, catalog.MaxNameLen) }
	realistic := "github-enterprise:search_issues_and_pull_requests_by_label" // 58 characters
	counter := func(a, b string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "TOOL#" + a}, "sk": &types.AttributeValueMemberS{Value: "WITH#" + b},
			"tool": &types.AttributeValueMemberS{Value: a}, "other": &types.AttributeValueMemberS{Value: b},
			"base":  &types.AttributeValueMemberS{Value: "TOOL#" + a},
			"count": &types.AttributeValueMemberN{Value: "123456789"},
		}
	}
	tests := []struct {
		name  string
		item  any // a record to marshal, or an item
		units int // at most
	}{
		{"execution", execItem{PK: execPK(id), SK: "META", ExpiresAt: exp, Execution: trace.Execution{
			ID: id, CodeHash: hash, CodeBytes: 1234, Status: "ok", StartedAt: start, DurationMS: 12.345,
			TraceID: "1-6741c8a0-0123456789abcdef01234567", Source: "http", Calls: 5}}, 1},
		// The tools it counts for co-occurrence ride on the execution item:
		// five realistic names keep it at one unit, the most it can hold
		// (MaxCountedTools of the longest names) stays bounded.
		{"execution, five tools", execItem{PK: execPK(id), SK: "META", ExpiresAt: exp, Execution: trace.Execution{
			ID: id, CodeHash: hash, CodeBytes: 1234, Status: "ok", StartedAt: start, DurationMS: 12.345,
			TraceID: "1-6741c8a0-0123456789abcdef01234567", Source: "http", Calls: 5},
			Tools: []string{realistic + "1", realistic + "2", realistic + "3", realistic + "4", realistic + "5"}}, 1},
		{"execution, most tools, longest names", execItem{PK: execPK(id), SK: "META", ExpiresAt: exp, Execution: trace.Execution{
			ID: id, CodeHash: hash, CodeBytes: 1234, Status: "ok", StartedAt: start, DurationMS: 12.345, Calls: 5},
			Tools: longTools(long("s"), long("t"))}, 9},
		// A successful execution that called tools carries its pattern
		// for the learning loop: a fingerprint, its tools in order, its
		// lifted literals, the args keys it reads. Five realistic tools and
		// six short literals stay within one unit; the first run of a
		// program in a process also carries its template (here 700 bytes of
		// code), and MaxLiterals literals of MaxValueBytes are bounded.
		{"execution, five tools, a pattern", patternItem(id, start, exp, []string{realistic + "1", realistic + "2", realistic + "3", realistic + "4", realistic + "5"}, 6, 12, 0), 1},
		{"execution, five tools, a pattern with its template", patternItem(id, start, exp, []string{realistic + "1", realistic + "2", realistic + "3", realistic + "4", realistic + "5"}, 6, 12, 700), 2},
		{"execution, a pattern, most literals, longest values", patternItem(id, start, exp, []string{realistic}, 32, 64, 0), 4},
		{"failed capability run, longest names", execItem{PK: execPK(child), SK: "META", ExpiresAt: exp, Execution: trace.Execution{
			ID: child, CodeHash: hash, CodeBytes: 99999, Status: "error", ErrorCode: fault.LimitExceeded, StartedAt: start, DurationMS: 30000.123,
			ParentExecutionID: id, ParentCallID: 12345, Capability: long("c") + ":" + long("d"), Depth: 5,
			TraceID: "1-6741c8a0-0123456789abcdef01234567", Source: "capability", Calls: 16384}}, 1},
		{"remote call", callItem{PK: execPK(id), SK: "CALL#000001", ExpiresAt: exp, Call: trace.Call{
			ExecutionID: id, CallID: 1, Server: "text", Tool: "word_count", Kind: trace.KindMCP, StartedAt: start,
			DurationMS: 48.123, OK: true, ArgsBytes: 120, ResultBytes: 42}}, 1},
		{"call, every field, longest names", callItem{PK: execPK(child), SK: "CALL#016384", ExpiresAt: exp, Call: trace.Call{
			ExecutionID: child, CallID: 16384, ParentCallID: 12345, Server: long("s"), Tool: long("t"),
			Kind: trace.KindCapability, StartedAt: start, DurationMS: 29999.999, OK: false, ErrorCode: fault.LimitExceeded,
			ArgsBytes: 6 << 20, ResultBytes: 6 << 20, ArgsHash: hash[:16], ResultHash: hash[:16], ChildExecutionID: id, Count: 100000}}, 1},
		{"co-occurrence counter", counter(realistic, realistic), 1},
		{"co-occurrence counter, longest names", counter(long("s")+":"+long("t"), long("u")+":"+long("v")), 2},
	}
	for _, tt := range tests {
		item, ok := tt.item.(map[string]types.AttributeValue)
		if !ok {
			var err error
			if item, err = marshalItem(tt.item); err != nil {
				t.Fatal(err)
			}
		}
		size := itemSize(item)
		t.Logf("%s: %d bytes, %d write unit(s)", tt.name, size, writeUnits(size))
		if writeUnits(size) > tt.units {
			t.Errorf("%s is %d bytes: %d write units, want at most %d", tt.name, size, writeUnits(size), tt.units)
		}
	}
}

// patternItem is the item of a successful execution of tools with a
// pattern of lits literals of n bytes each and a template of tpl bytes
// (none when 0).
func patternItem(id string, start time.Time, exp int64, tools []string, lits, n, tpl int) map[string]types.AttributeValue {
	p := &trace.Pattern{Fingerprint: "0123456789abcdef", Tools: tools, ArgsKeys: []string{"city", "days"}}
	for i := range lits {
		p.Literals = append(p.Literals, trace.Literal{Kind: trace.LiteralString, Value: strings.Repeat(string(rune('a'+i%26)), n)})
	}
	if tpl > 0 {
		t := &trace.Template{Code: strings.Repeat("x", tpl), Comments: []string{"what it does"}}
		for i := range lits {
			t.Holes, t.Names = append(t.Holes, i*10), append(t.Names, fmt.Sprintf("name%d", i))
		}
		p.Template = t
	}
	var calls []trace.Call
	for i, tool := range tools {
		server, name, _ := strings.Cut(tool, ":")
		calls = append(calls, trace.Call{ExecutionID: id, CallID: i + 1, Server: server, Tool: name})
	}
	ex := trace.Execution{ID: id, CodeHash: strings.Repeat("a", 64), CodeBytes: 1234, Status: "ok", StartedAt: start, DurationMS: 12.345,
		TraceID: "1-6741c8a0-0123456789abcdef01234567", Source: "http", Calls: len(tools), Principal: "jwt:https://idp.example.com#agent-7", Pattern: p}
	item, err := marshalItem(newExecItem(ex, calls, exp))
	if err != nil {
		panic(err)
	}
	return item
}
