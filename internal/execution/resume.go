package execution

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/pml-sandbox/pml/internal/fault"
)

// MaxReasonBytes bounds a decision's reason: it is kept in the trace.
const MaxReasonBytes = 1000

// The words of a decision.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
	// DecisionAnswer answers the question a remote server asked about a
	// call (Pending.Questions): the call is sent again with the answers.
	DecisionAnswer = "answer"
)

// The scopes of a decision (its "scope"): the call alone, or a grant
// over the call's site; and what a decision on every pending call is to
// an MCP client's form (a resume request says AllCalls instead).
const (
	ScopeCall = "call"
	ScopeSite = "site"
	ScopeAll  = "all"
)

// AllCalls is the key of a decision on every pending call that no other
// decision names ({"*": "approve"}): approving so leaves the calls that
// wait for an answer to their server's question waiting, rejecting
// rejects them too.
const AllCalls = "*"

// MaxGrantPins bounds the argument keys a grant pins.
const MaxGrantPins = 16

// DefaultMaxGrant is the most calls one grant may cover unless the
// deployment says otherwise (PML_MAX_GRANT_CALLS).
const DefaultMaxGrant = 100

// Decision is what someone decided about a parked call. Its JSON is
// "approve", "reject", {"decision": "reject", "reason": "…"}, or, for a
// call parked on a remote server's question, {"decision": "answer",
// "answers": {KEY: {"action": "accept", "content": {…}}}} with one
// elicitation result per question, by the server's keys (a decline or
// cancel there rejects the call); a reason reaches the script in a
// rejection's message, and the trace either way. An approval may cover
// more than its call: {"decision": "approve", "scope": "site", "count":
// 20, "pin": ["table"]} approves the call and grants up to count calls of
// its call site, this one included, while the pinned arguments keep the
// values this call has (see Grant).
type Decision struct {
	Approve bool
	Reason  string
	// Answers, on an answer (Approve is set), are the elicitation results
	// by question key, as the remote server will receive them.
	Answers map[string]json.RawMessage
	// Site, on an approval, makes it a grant over the call's site.
	Site *SiteScope
}

// SiteScope is what an approval with scope "site" grants: up to Count
// calls of the approved call's site (it included), while the arguments
// Pin names keep the values it has.
type SiteScope struct {
	Count int
	Pin   []string
}

// decisionObject is a decision's object form.
type decisionObject struct {
	Decision string                     `json:"decision"`
	Reason   string                     `json:"reason,omitempty"`
	Answers  map[string]json.RawMessage `json:"answers,omitempty"`
	Scope    string                     `json:"scope,omitempty"`
	Count    *int                       `json:"count,omitempty"`
	Pin      []string                   `json:"pin,omitempty"`
}

// UnmarshalJSON implements json.Unmarshaler, as strictly as the requests
// that carry decisions.
func (d *Decision) UnmarshalJSON(b []byte) error {
	var word string
	if err := json.Unmarshal(b, &word); err == nil {
		return d.set(word, "")
	}
	var obj decisionObject
	if err := jsonv2.Unmarshal(b, &obj, jsonv2.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf(`a decision is "approve", "reject", {"decision": "reject", "reason": "…"} or {"decision": "answer", "answers": {…}}: %s`, explain(err, &obj))
	}
	if err := d.set(obj.Decision, obj.Reason); err != nil {
		return err
	}
	switch {
	case obj.Decision == DecisionAnswer && len(obj.Answers) == 0:
		return fmt.Errorf(`an answer names its answers: {"decision": "answer", "answers": {KEY: {"action": "accept", "content": {…}}}}`)
	case obj.Decision != DecisionAnswer && obj.Answers != nil:
		return fmt.Errorf(`answers go with "decision": "answer", not %q`, obj.Decision)
	}
	d.Answers = obj.Answers
	return d.setScope(obj)
}

// setScope reads an object's scope: "site" (with count, and pin) on an
// approval only.
func (d *Decision) setScope(obj decisionObject) error {
	switch obj.Scope {
	case "", ScopeCall:
		if obj.Count != nil || obj.Pin != nil {
			return fmt.Errorf(`count and pin go with "scope": "site"`)
		}
		return nil
	case ScopeSite:
	default:
		return fmt.Errorf(`a decision's scope is "call" or "site", not %q (decide every pending call with the key %q)`, obj.Scope, AllCalls)
	}
	switch {
	case obj.Decision != DecisionApprove:
		return fmt.Errorf(`"scope": "site" goes with "decision": "approve": a grant approves calls`)
	case obj.Count == nil:
		return fmt.Errorf(`"scope": "site" needs "count": how many calls of the site the grant covers, this one included`)
	case *obj.Count < 1:
		return fmt.Errorf("a grant's count is at least 1, not %d", *obj.Count)
	case len(obj.Pin) > MaxGrantPins:
		return fmt.Errorf("a grant pins at most %d arguments (got %d)", MaxGrantPins, len(obj.Pin))
	}
	d.Site = &SiteScope{Count: *obj.Count, Pin: obj.Pin}
	return nil
}

func (d *Decision) set(word, reason string) error {
	switch word {
	case DecisionApprove, DecisionReject:
	case DecisionAnswer:
		if reason != "" {
			return fmt.Errorf("an answer has no reason: the answers say it")
		}
	default:
		return fmt.Errorf(`a decision is "approve", "reject" or "answer", not %q`, word)
	}
	if len(reason) > MaxReasonBytes {
		return fmt.Errorf("a decision's reason is at most %d bytes (got %d)", MaxReasonBytes, len(reason))
	}
	*d = Decision{Approve: word != DecisionReject, Reason: reason}
	return nil
}

// MarshalJSON implements json.Marshaler: the word alone, or the object
// form when there is a reason.
func (d Decision) MarshalJSON() ([]byte, error) {
	if d.Reason == "" && d.Answers == nil && d.Site == nil {
		return json.Marshal(d.Word())
	}
	obj := decisionObject{Decision: d.Word(), Reason: d.Reason, Answers: d.Answers}
	if d.Site != nil {
		count := d.Site.Count
		obj.Scope, obj.Count, obj.Pin = ScopeSite, &count, d.Site.Pin
	}
	return json.Marshal(obj)
}

// Word is "approve", "reject" or "answer".
func (d Decision) Word() string {
	switch {
	case d.Answers != nil:
		return DecisionAnswer
	case d.Approve:
		return DecisionApprove
	}
	return DecisionReject
}

// Channel is how a decision reached the service. Who may decide is the
// deployment's policy (internal/approval), and it weighs an answer by who
// could have given it: the same principal counts for more when a person
// had to sign in than when whoever holds the caller's credentials could
// have sent it.
type Channel string

// The channels a decision may come by.
const (
	// ChannelCaller: a request made with the principal's credentials (the
	// HTTP API, resume_execution over /mcp, the CLI, a Lambda event) — any
	// holder of those credentials, an agent included. The zero value: a
	// front that says nothing claims nothing more.
	ChannelCaller Channel = ""
	// ChannelClient: a form-mode elicitation answered through the
	// caller's own MCP client, checked against the sealed state it was
	// asked with. Only as human as the client: an agent runtime with an
	// auto-accepting handler answers too.
	ChannelClient Channel = "client"
	// ChannelPage: a person signed in on the approval page (the
	// deployment's OpenID Connect provider, or pml serve's one-time local
	// link), deciding there with a CSRF-protected form.
	ChannelPage Channel = "page"
)

// ResumeRequest continues a suspended execution with decisions on some or
// all of its pending calls (an undecided call stays parked).
type ResumeRequest struct {
	ExecutionID string `json:"execution_id"`
	// Decisions by call id ("2": "approve"), and AllCalls ("*") for
	// every pending call no other key names.
	Decisions map[string]Decision `json:"decisions"`
	// CallDetail is how much of the calls the response carries, as
	// Request.CallDetail.
	CallDetail string `json:"call_detail,omitempty"`

	// Set by the host, never by the caller's JSON: as in Request.
	Principal   string      `json:"-"`
	TraceHeader string      `json:"-"`
	OnEvent     func(Event) `json:"-"`
	// Channel is how the decisions reached the service, set by the front
	// end that received them: the approval policy weighs an answer by who
	// could have given it (ChannelCaller unless a front says otherwise).
	Channel Channel `json:"-"`
	// Version, when set, is the version of the execution's stored state
	// the decisions were asked about: the resume is refused (CONFLICT) if
	// the execution has moved on, so an answer is used once.
	Version int `json:"-"`
}

// resumeBody is a resume request as callers send it. ExecutionID is a
// pointer to tell "absent" from "empty": the HTTP route takes the id from
// its path and refuses it in the body.
type resumeBody struct {
	ExecutionID *string             `json:"execution_id"`
	Decisions   map[string]Decision `json:"decisions"`
	CallDetail  string              `json:"call_detail,omitempty"`
}

// DecodeResume reads a resume request strictly: with pathID set, the body
// of POST /executions/{id}/resume, which holds decisions and call_detail
// only; with pathID "", a direct invocation's "resume" object or
// resume_execution's arguments, which name execution_id too.
func DecodeResume(data []byte, pathID string) (ResumeRequest, *fault.Error) {
	var rb resumeBody
	if ferr := decodeStrict(data, &rb, "a resume request"); ferr != nil {
		return ResumeRequest{}, ferr
	}
	id := pathID
	switch {
	case pathID != "" && rb.ExecutionID != nil:
		return ResumeRequest{}, fault.New(fault.InvalidRequest, "execution_id is in the path, not the body: send only decisions (and call_detail)")
	case pathID == "":
		if rb.ExecutionID == nil || strings.TrimSpace(*rb.ExecutionID) == "" {
			return ResumeRequest{}, fault.New(fault.InvalidRequest, "execution_id is missing or empty")
		}
		id = *rb.ExecutionID
	}
	rr := ResumeRequest{ExecutionID: id, Decisions: rb.Decisions, CallDetail: rb.CallDetail}
	if _, ferr := rr.CallDecisions(); ferr != nil {
		return ResumeRequest{}, ferr
	}
	if ferr := CheckCallDetail(rr.CallDetail); ferr != nil {
		return ResumeRequest{}, ferr
	}
	return rr, nil
}

// CallDecisions checks the decisions' keys and returns them by call id
// (without the AllCalls decision: see All).
func (r *ResumeRequest) CallDecisions() (map[int]Decision, *fault.Error) {
	if len(r.Decisions) == 0 {
		return nil, fault.New(fault.InvalidRequest, `decisions is missing or empty: give one per call to decide, e.g. {"2": "approve", "3": {"decision": "reject", "reason": "…"}}, or {"*": "approve"} for every pending call`)
	}
	out := make(map[int]Decision, len(r.Decisions))
	for k, d := range r.Decisions {
		if k == AllCalls {
			if d.Site != nil || d.Answers != nil {
				return nil, fault.New(fault.InvalidRequest, `the decision on every pending call (%q) approves or rejects: it grants nothing and answers no question`, AllCalls)
			}
			continue
		}
		id, err := strconv.Atoi(k)
		if err != nil || id < 1 {
			return nil, fault.New(fault.InvalidRequest, "decisions are keyed by call id (a positive integer), not %q", k)
		}
		out[id] = d
	}
	return out, nil
}

// All is the decision on every pending call no other key names, when the
// request makes one.
func (r *ResumeRequest) All() (Decision, bool) {
	d, ok := r.Decisions[AllCalls]
	return d, ok
}

// CancelRequest asks to cancel an execution (DELETE /executions/{id},
// MCP's tasks/cancel, pml cancel).
type CancelRequest struct {
	ExecutionID string
	// Principal is who asks, as Request.Principal: the execution's owner
	// may cancel it, and so may an approver.
	Principal string
}
