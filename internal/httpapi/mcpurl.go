package httpapi

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
)

// URL-mode elicitation (MCP 2025-11-25, SEP-1036; the 2026-07-28
// input_required form). A form-mode answer is only as human as the client
// that relays it, so where the deployment does not trust the caller's
// client (approval.Policy.TrustsClient), its user is not asked to decide
// in a form at all: they are sent, with mode "url", to the execution's
// page on the approval page, where they sign in as themselves and decide.
// The retry that follows decides nothing; it reports what the page
// decided: the execution's document once it ran on, the question again
// while it still waits.

// How a request's suspended calls are put to a person.
const (
	askNone = iota // the document is answered: nobody is asked
	askForm        // in a form, through a client the deployment trusts
	askPage        // sent to the approval page (URL mode)
	// askDoc: the client wants to be asked, but its form would not count
	// and it cannot open a URL; the execution waits, and the document
	// (and its text) name the page for the user to open.
	askDoc
)

// pageElicitID is the id of a URL-mode question in input_required.
const pageElicitID = "approval-page"

// askMode says how this request's pending calls reach a person: a form
// where the client's answer would count and the client can show one; the
// page where the client can open a URL and there is a page; else not at
// all (the document names the page, for the user to open).
func (a *api) askMode(ctx context.Context) int {
	if a.StateKey == nil || !a.Suspends {
		return askNone
	}
	form, url := clientElicitModes(ctx)
	switch {
	case form && a.Policy.TrustsClient(execution.PrincipalFrom(ctx)):
		return askForm
	case a.Approvals == nil || a.approvalURL(ctx, "x") == "":
		return askNone
	case url:
		return askPage
	case form:
		return askDoc
	}
	return askNone
}

// clientElicitModes reports which elicitation modes the request's client
// declared: a 2026-07-28 request in its own _meta, an older client at
// initialize (a session). A client that declares elicitation with no mode
// supports form only, as the specification says.
func clientElicitModes(ctx context.Context) (form, url bool) {
	var c *mcp.ElicitationCapability
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		if info.ClientCapabilities != nil {
			c = info.ClientCapabilities.Elicitation
		}
	} else if s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
		c = s.GetClientCapabilities().Elicitation
	}
	if c == nil {
		return false, false
	}
	return c.Form != nil || c.URL == nil, c.URL != nil
}

// askPage sends the client's user to resp's page: one URL-mode
// elicitation, with the sealed state the retry comes back with.
func (a *api) askPage(ctx context.Context, resp *execution.Response, budget int) *mcp.CallToolResult {
	st := approval.State{ExecutionID: resp.ExecutionID, Version: resp.StateVersion, Principal: resp.Owner, Expires: resp.ExpiresAt.Unix(), Page: true}
	var calls []string
	for _, p := range resp.Pending {
		st.Calls = append(st.Calls, p.CallID)
		calls = append(calls, "#"+strconv.Itoa(p.CallID)+" "+p.Server+"."+p.Tool)
	}
	token, err := a.StateKey.Seal(st)
	if err != nil {
		a.Logger.Warn("cannot ask the client's user: answering the suspended document", "execution_id", resp.ExecutionID, "err", err)
		return a.executionResult(resp, budget)
	}
	url := a.approvalURL(ctx, resp.ExecutionID)
	noun := "calls"
	if len(calls) == 1 {
		noun = "call"
	}
	msg := fmt.Sprintf("A script wants to make %d %s that a person must approve: %s. Nothing has run yet. "+
		"Open the approval page, sign in, read each call in full and approve or reject it there; then continue here. "+
		"Execution %s waits until %s.", len(calls), noun, strings.Join(calls, ", "), resp.ExecutionID, resp.ExpiresAt.UTC().Format(time.RFC3339))
	return server.NewInputRequestBuilder("").
		Elicit(pageElicitID, mcp.ElicitationParams{Mode: mcp.ElicitationModeURL, Message: msg, URL: url,
			ElicitationID: resp.ExecutionID + "@" + strconv.Itoa(resp.StateVersion)}).
		RequestState(token).ToolResult()
}

// afterPage answers the retry of a question that sent the person to the
// page: what the page decided, never what the retry says. While the
// execution waits at the version asked about, nothing was decided: the
// question again, or the suspended document when the user declined to
// open the page; once decisions moved it on, the question about what
// still waits, or the document it ended with.
func (a *api) afterPage(ctx context.Context, r mcp.CallToolRequest, st approval.State, budget int) *mcp.CallToolResult {
	waiting, ferr := a.Service.Waiting(ctx, st.ExecutionID)
	if ferr == nil {
		res := server.ElicitationResponse(r.Params.InputResponses, pageElicitID)
		if waiting.StateVersion == st.Version && (res == nil || res.Action != mcp.ElicitationResponseActionAccept) {
			return a.executionResult(waiting, budget)
		}
		return a.askPage(ctx, waiting, budget)
	}
	// Not waiting any more: how it ended, as its caller may read it.
	doc, sferr := a.Service.Status(ctx, st.ExecutionID, execution.PrincipalFrom(ctx))
	if sferr != nil {
		return a.refusal(st.ExecutionID, ferr)
	}
	return a.executionResult(doc, budget)
}
