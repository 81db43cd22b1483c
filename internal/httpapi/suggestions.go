package httpapi

import (
	"context"
	"net/http"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
)

// SuggestionPublish is the body of POST /capabilities/suggestions/{id}/publish.
type SuggestionPublish struct {
	// Name, when set, replaces the proposed ns:action.
	Name string `json:"name,omitempty"`
}

// annotate adds the capabilities' evidence to the d.ts, where a Ranker
// knows it.
func (a *api) annotate(ctx context.Context, tools []catalog.Tool) []catalog.Tool {
	if a.Ranker != nil {
		return a.Ranker.Annotate(ctx, tools)
	}
	return tools
}

func (a *api) listSuggestions(w http.ResponseWriter, r *http.Request) {
	if a.Suggestions == nil {
		httpjson.Write(w, http.StatusOK, map[string]any{"suggestions": []any{}})
		return
	}
	list, err := a.Suggestions.List(r.Context(), execution.PrincipalFrom(r.Context()))
	if err != nil {
		httpjson.WriteError(w, faultStatus(fault.As(err)), fault.As(err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"suggestions": list})
}

func (a *api) publishSuggestion(w http.ResponseWriter, r *http.Request) {
	if a.Suggestions == nil {
		httpjson.WriteError(w, http.StatusNotFound, fault.New(fault.NotFound, "this deployment keeps no suggestions"))
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var p SuggestionPublish
	if ferr := execution.DecodeStrict(body, &p, "a suggestion to publish"); ferr != nil {
		httpjson.WriteError(w, http.StatusBadRequest, ferr)
		return
	}
	saved, err := a.Suggestions.Publish(r.Context(), execution.PrincipalFrom(r.Context()), r.PathValue("id"), p.Name)
	if err != nil {
		httpjson.WriteError(w, faultStatus(fault.As(err)), fault.As(err))
		return
	}
	status := http.StatusCreated
	if o, ok := saved.(capability.Outcome); ok {
		// As a save's: 202 for the draft a principal that may not
		// publish proposes.
		status = outcomeStatus(o)
	}
	httpjson.Write(w, status, saved)
}

// faultStatus is the HTTP status of a refusal from the suggestions or
// the registry behind them.
func faultStatus(fe *fault.Error) int {
	switch fe.Code {
	case fault.NotFound:
		return http.StatusNotFound
	case fault.Forbidden:
		return http.StatusForbidden
	case fault.Conflict:
		return http.StatusConflict
	case fault.InvalidRequest, fault.InvalidArguments, fault.ScriptError:
		return http.StatusBadRequest
	case fault.LimitExceeded:
		return limitStatus(fe)
	case fault.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
