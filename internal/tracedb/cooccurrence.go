package tracedb

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/aggregate"
)

// toolPK is the partition of tool's co-occurrence counters (before
// sharding), withSK a counter's sort key in it.
func toolPK(tool string) string  { return "TOOL#" + tool }
func withSK(other string) string { return "WITH#" + other }

// CoOccurrence is the aggregate.Extractor of tool co-occurrence, for the
// aggregator function on the traces table's stream. An execution item
// written (INSERT) or written again (MODIFY: a durable execution's next
// run) adds one to TOOL#a / WITH#b and TOOL#b / WITH#a for each pair of
// distinct tools in its new image's tools that its old image did not
// already have (newPairs): every execution counts each pair once. Other
// items (calls, counters, the aggregator's own) and deletions count
// nothing.
func CoOccurrence(rec events.DynamoDBEventRecord) ([]aggregate.Increment, error) {
	if rec.EventName != string(events.DynamoDBOperationTypeInsert) && rec.EventName != string(events.DynamoDBOperationTypeModify) {
		return nil, nil
	}
	pk, sk := keyString(rec.Change.Keys, "pk"), keyString(rec.Change.Keys, "sk")
	if sk != "META" || !strings.HasPrefix(pk, "EXEC#") {
		return nil, nil
	}
	now, err := imageTools(rec.Change.NewImage)
	if err != nil {
		return nil, fmt.Errorf("%s: new image: %w", pk, err)
	}
	old, err := imageTools(rec.Change.OldImage)
	if err != nil {
		return nil, fmt.Errorf("%s: old image: %w", pk, err)
	}
	pairs := newPairs(old, now)
	out := make([]aggregate.Increment, len(pairs))
	for i, p := range pairs {
		out[i] = aggregate.Increment{PK: toolPK(p[0]), SK: withSK(p[1]), N: 1, Labels: map[string]string{"tool": p[0], "other": p[1]}}
	}
	return out, nil
}

func keyString(m map[string]events.DynamoDBAttributeValue, name string) string {
	if v, ok := m[name]; ok && v.DataType() == events.DataTypeString {
		return v.String()
	}
	return ""
}

// imageTools reads an execution item's tools: a list of distinct
// non-empty strings, at most MaxCountedTools of them (no writer stores
// more; a longer list is refused rather than counted quadratically). None
// (an old image that does not exist, or an execution without tools) is an
// empty list.
func imageTools(img map[string]events.DynamoDBAttributeValue) ([]string, error) {
	v, ok := img["tools"]
	if !ok || v.IsNull() {
		return nil, nil
	}
	if v.DataType() != events.DataTypeList {
		return nil, errors.New("tools is not a list")
	}
	l := v.List()
	if len(l) > MaxCountedTools {
		return nil, fmt.Errorf("%d tools, more than the %d counted", len(l), MaxCountedTools)
	}
	tools := make([]string, 0, len(l))
	for _, x := range l {
		if x.DataType() != events.DataTypeString || x.String() == "" {
			return nil, errors.New("a tool that is not a non-empty string")
		}
		for _, t := range tools {
			if t == x.String() {
				return nil, fmt.Errorf("tool %q listed twice", t)
			}
		}
		tools = append(tools, x.String())
	}
	return tools, nil
}
