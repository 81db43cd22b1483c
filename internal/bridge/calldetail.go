package bridge

import (
	"cmp"
	"slices"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// How much of an execution's calls a response carries (Request.CallDetail).
// Traces keep every record whatever the response carries.
const (
	CallDetailFull    = "full"    // every call record (the default)
	CallDetailSummary = "summary" // counts per tool and the failed calls
	CallDetailNone    = "none"    // nothing about calls
)

// maxFailures is the most failed calls a summary lists one by one.
const maxFailures = 20

// CheckCallDetail returns an InvalidRequest error for an unknown level.
func CheckCallDetail(d string) *fault.Error {
	switch d {
	case "", CallDetailFull, CallDetailSummary, CallDetailNone:
		return nil
	}
	return fault.New(fault.InvalidRequest, `call_detail must be "full", "summary" or "none", not %q`, d)
}

// CallSummary stands for an execution's call records, small enough for a
// model's context whatever the number of calls.
type CallSummary struct {
	Total  int `json:"total"`
	Failed int `json:"failed"`
	// ByTool counts the calls of each tool ("server:tool"), most called
	// first.
	ByTool []ToolCount `json:"by_tool"`
	// Failures lists the first failed calls, in the order they were made;
	// FailuresOmitted counts the rest.
	Failures        []FailedCall `json:"failures,omitempty"`
	FailuresOmitted int          `json:"failures_omitted,omitempty"`
}

// ToolCount is how often one tool was called, and how often that failed.
type ToolCount struct {
	Tool   string `json:"tool"`
	Calls  int    `json:"calls"`
	Failed int    `json:"failed,omitempty"`
}

// FailedCall names one failed call.
type FailedCall struct {
	// ExecutionID is set for a call of a capability run below this one.
	ExecutionID string     `json:"execution_id,omitempty"`
	CallID      int        `json:"call_id"`
	Tool        string     `json:"tool"`
	ErrorCode   fault.Code `json:"error_code"`
	// Count is how many calls a summary record stands for (calls refused
	// past the tool_calls limit).
	Count int `json:"count,omitempty"`
}

// Summarize counts calls (of executionID and any run below it).
func Summarize(executionID string, calls []trace.Call) *CallSummary {
	s := &CallSummary{ByTool: []ToolCount{}}
	index := map[string]int{}
	for _, c := range calls {
		n := max(c.Count, 1)
		name := c.Server + ":" + c.Tool
		i, ok := index[name]
		if !ok {
			i = len(s.ByTool)
			index[name] = i
			s.ByTool = append(s.ByTool, ToolCount{Tool: name})
		}
		s.Total += n
		s.ByTool[i].Calls += n
		if c.OK || c.Status != "" {
			// Parked, or never run: neither failed.
			continue
		}
		s.Failed += n
		s.ByTool[i].Failed += n
		if len(s.Failures) == maxFailures {
			s.FailuresOmitted++
			continue
		}
		f := FailedCall{CallID: c.CallID, Tool: name, ErrorCode: c.ErrorCode, Count: c.Count}
		if c.ExecutionID != executionID {
			f.ExecutionID = c.ExecutionID
		}
		s.Failures = append(s.Failures, f)
	}
	slices.SortStableFunc(s.ByTool, func(a, b ToolCount) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Tool, b.Tool))
	})
	return s
}

// applyCallDetail trims resp's calls to what the request asked for. A nil
// Calls is left out of the JSON, so "calls": [] still means no calls.
func applyCallDetail(resp *Response, detail string) {
	switch detail {
	case CallDetailSummary:
		resp.CallSummary = Summarize(resp.ExecutionID, resp.Calls)
		resp.Calls = nil
	case CallDetailNone:
		resp.Calls = nil
	}
}
