package httpapi

import (
	"context"
	"net/http"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Suggestions shows what the learning loop suggests keeping as
// capabilities (internal/learn, through the app) and publishes one. A
// principal sees only the candidates it ran, an approver all of them.
// Results are sent as JSON.
type Suggestions interface {
	// List is what principal may see.
	List(ctx context.Context, principal string) (any, error)
	// Publish publishes suggestion id, under name (its proposed one when
	// empty), through the registry's guarded save path; NOT_FOUND unless
	// principal may see it.
	Publish(ctx context.Context, principal, id, name string) (any, error)
}

// Ranker ranks search results and adds the capabilities' evidence to
// their descriptions (internal/learn.Ranker); without one, search is
// lexical.
type Ranker interface {
	Search(ctx context.Context, tools []catalog.Tool, query string, limit int) []catalog.Hit
	Annotate(ctx context.Context, tools []catalog.Tool) []catalog.Tool
}

// SuggestionPublish is the body of POST /capabilities/suggestions/{id}/publish.
type SuggestionPublish struct {
	// Name, when set, replaces the proposed ns:action.
	Name string `json:"name,omitempty"`
}

func (a *api) search(ctx context.Context, tools []catalog.Tool, query string, limit int) []catalog.Hit {
	if a.Ranker != nil {
		return a.Ranker.Search(ctx, tools, query, limit)
	}
	return catalog.Search(tools, query, limit)
}

func (a *api) annotate(ctx context.Context, tools []catalog.Tool) []catalog.Tool {
	if a.Ranker != nil {
		return a.Ranker.Annotate(ctx, tools)
	}
	return tools
}

func (a *api) listSuggestions(w http.ResponseWriter, r *http.Request) {
	if a.Suggestions == nil {
		writeJSON(w, http.StatusOK, map[string]any{"suggestions": []any{}})
		return
	}
	list, err := a.Suggestions.List(r.Context(), execution.PrincipalFrom(r.Context()))
	if err != nil {
		writeError(w, faultStatus(fault.As(err)), fault.As(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"suggestions": list})
}

func (a *api) publishSuggestion(w http.ResponseWriter, r *http.Request) {
	if a.Suggestions == nil {
		writeError(w, http.StatusNotFound, fault.New(fault.NotFound, "this deployment keeps no suggestions"))
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var p SuggestionPublish
	if ferr := execution.DecodeStrict(body, &p, "a suggestion to publish"); ferr != nil {
		writeError(w, http.StatusBadRequest, ferr)
		return
	}
	saved, err := a.Suggestions.Publish(r.Context(), execution.PrincipalFrom(r.Context()), r.PathValue("id"), p.Name)
	if err != nil {
		writeError(w, faultStatus(fault.As(err)), fault.As(err))
		return
	}
	writeJSON(w, http.StatusCreated, saved)
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
