// Package avpstandin is a stand-in for Amazon Verified Permissions'
// IsAuthorized on loopback, for tests: it speaks the service's wire
// protocol (AWS JSON 1.0) to the real SDK through its endpoint override,
// and answers from a policy set it holds, evaluated by cedar-go. It reads
// requests as the service does: entities and context in Cedar's JSON.
package avpstandin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/pml-sandbox/pml/internal/policy"
)

// Server is a running stand-in.
type Server struct {
	// URL is its endpoint, for the SDK's BaseEndpoint.
	URL string
	// StoreID is the one policy store it knows.
	StoreID string
	// Calls counts the IsAuthorized requests answered.
	Calls atomic.Int64
	set   *policy.Set
}

// Start serves set as policy store storeID until the test ends.
func Start(tb testing.TB, storeID string, set *policy.Set) *Server {
	s := &Server{StoreID: storeID, set: set}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

type identifier struct {
	EntityType string `json:"entityType"`
	EntityID   string `json:"entityId"`
}

type request struct {
	PolicyStoreID string     `json:"policyStoreId"`
	Principal     identifier `json:"principal"`
	Action        struct {
		ActionType string `json:"actionType"`
		ActionID   string `json:"actionId"`
	} `json:"action"`
	Resource identifier `json:"resource"`
	Context  struct {
		CedarJSON string `json:"cedarJson"`
	} `json:"context"`
	Entities struct {
		CedarJSON string `json:"cedarJson"`
	} `json:"entities"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Amz-Target") != "VerifiedPermissions.IsAuthorized" {
		fail(w, http.StatusBadRequest, "UnknownOperationException", "only IsAuthorized is served")
		return
	}
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "ValidationException", err.Error())
		return
	}
	if req.PolicyStoreID != s.StoreID {
		fail(w, http.StatusBadRequest, "ResourceNotFoundException", "no policy store "+req.PolicyStoreID)
		return
	}
	var in policy.Input
	if err := json.Unmarshal([]byte(req.Entities.CedarJSON), &in.Entities); err != nil {
		fail(w, http.StatusBadRequest, "ValidationException", "entities: "+err.Error())
		return
	}
	if err := json.Unmarshal([]byte(req.Context.CedarJSON), &in.Context); err != nil {
		fail(w, http.StatusBadRequest, "ValidationException", "context: "+err.Error())
		return
	}
	in.Principal = types.NewEntityUID(types.EntityType(req.Principal.EntityType), types.String(req.Principal.EntityID))
	in.Action = types.NewEntityUID(types.EntityType(req.Action.ActionType), types.String(req.Action.ActionID))
	in.Resource = types.NewEntityUID(types.EntityType(req.Resource.EntityType), types.String(req.Resource.EntityID))
	d, _ := s.set.Authorize(context.Background(), in)
	s.Calls.Add(1)
	out := map[string]any{"decision": "DENY", "determiningPolicies": []any{}, "errors": []any{}}
	if d.Allowed {
		out["decision"] = "ALLOW"
	}
	var pols, errs []any
	for _, p := range d.Policies {
		pols = append(pols, map[string]string{"policyId": p})
	}
	for _, e := range d.Errors {
		errs = append(errs, map[string]string{"errorDescription": e})
	}
	if pols != nil {
		out["determiningPolicies"] = pols
	}
	if errs != nil {
		out["errors"] = errs
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

func fail(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Errortype", typ)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}
