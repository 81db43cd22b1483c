package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
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
func (s *Server) askMode(ctx context.Context) int {
	if s.opts.StateKey == nil || !s.opts.Suspends {
		return askNone
	}
	form, url := clientElicitModes(ctx)
	switch {
	case form && s.opts.Policy.TrustsClient(execution.PrincipalFrom(ctx)):
		return askForm
	case s.opts.Approvals == nil || s.approvalURL(ctx, "x") == "":
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
// elicitation, with the sealed state the retry comes back with. Its
// message names what waits there: calls to approve, and the questions
// remote servers asked about calls (answered on the page as the server
// asked them, never by the client's form).
func (s *Server) askPage(ctx context.Context, resp *execution.Response, budget int) *mcp.CallToolResult {
	st := approval.State{ExecutionID: resp.ExecutionID, Version: resp.StateVersion, Principal: resp.Owner, Expires: resp.ExpiresAt.Unix(), Page: true}
	var calls, asked []string
	for _, p := range resp.Pending {
		st.Calls = append(st.Calls, p.CallID)
		if p.Reason == execution.PendingQuestion {
			asked = append(asked, askedText(p))
			continue
		}
		calls = append(calls, "#"+strconv.Itoa(p.CallID)+" "+p.Server+"."+p.Tool)
	}
	token, err := s.opts.StateKey.Seal(st)
	if err != nil {
		s.opts.Logger.Warn("cannot ask the client's user: answering the suspended document", "execution_id", resp.ExecutionID, "err", err)
		return s.executionResult(resp, budget)
	}
	url := s.approvalURL(ctx, resp.ExecutionID)
	var msg strings.Builder
	if len(calls) > 0 {
		noun := "calls"
		if len(calls) == 1 {
			noun = "call"
		}
		fmt.Fprintf(&msg, "A script wants to make %d %s that a person must approve: %s. Nothing of them has run yet. ", len(calls), noun, strings.Join(calls, ", "))
	}
	for _, q := range asked {
		msg.WriteString(q + " ")
	}
	what := "read each call in full and approve or reject it there"
	switch {
	case len(asked) > 0 && len(calls) > 0:
		what = "read each call in full, approve or reject it, and answer or decline each server's question there"
	case len(asked) > 0:
		what = "read the question in full and answer or decline it there (the answer goes to the server)"
	}
	fmt.Fprintf(&msg, "Open the approval page, sign in, %s; then continue here. Execution %s waits until %s.", what, resp.ExecutionID, resp.ExpiresAt.UTC().Format(time.RFC3339))
	return server.NewInputRequestBuilder("").
		Elicit(pageElicitID, mcp.ElicitationParams{Mode: mcp.ElicitationModeURL, Message: msg.String(), URL: url,
			ElicitationID: resp.ExecutionID + "@" + strconv.Itoa(resp.StateVersion)}).
		RequestState(token).ToolResult()
}

// maxAskedText bounds each remote question quoted in the message that
// sends the user to the page, which shows it whole.
const maxAskedText = 300

// askedText is what a remote server asked about call p, in a sentence:
// who asks, about which call, and its questions' messages (each cut to
// maxAskedText bytes, the page showing them whole).
func askedText(p execution.Pending) string {
	var msgs []string
	for _, key := range slices.Sorted(maps.Keys(p.Questions)) {
		var params mcp.ElicitationParams
		if err := json.Unmarshal(p.Questions[key], &params); err != nil {
			continue
		}
		m := params.Message
		if len(m) > maxAskedText {
			m = truncateUTF8(m, maxAskedText) + fmt.Sprintf("… (%d more bytes on the page)", len(m)-len(truncateUTF8(m, maxAskedText)))
		}
		if params.Mode == mcp.ElicitationModeURL {
			m += " (it asks you to open a page of its own: the approval page shows its address)"
		}
		msgs = append(msgs, strconv.Quote(m))
	}
	return fmt.Sprintf("The MCP server %q asks a question before it answers the script's call #%d %s.%s: %s.",
		p.Server, p.CallID, p.Server, p.Tool, strings.Join(msgs, "; "))
}

// afterPage answers the retry of a question that sent the person to the
// page: what the page decided, never what the retry says. While the
// execution waits at the version asked about, nothing was decided: the
// question again, or the suspended document when the user declined to
// open the page; once decisions moved it on, the question about what
// still waits, or the document it ended with.
func (s *Server) afterPage(ctx context.Context, r mcp.CallToolRequest, st approval.State, budget int) *mcp.CallToolResult {
	waiting, ferr := s.opts.Service.Waiting(ctx, st.ExecutionID)
	if ferr == nil {
		res := server.ElicitationResponse(r.Params.InputResponses, pageElicitID)
		if waiting.StateVersion == st.Version && (res == nil || res.Action != mcp.ElicitationResponseActionAccept) {
			return s.executionResult(waiting, budget)
		}
		return s.askPage(ctx, waiting, budget)
	}
	// Not waiting any more: how it ended, as its caller may read it.
	doc, sferr := s.opts.Service.Status(ctx, st.ExecutionID, execution.PrincipalFrom(ctx))
	if sferr != nil {
		return s.refusal(st.ExecutionID, ferr)
	}
	return s.executionResult(doc, budget)
}
