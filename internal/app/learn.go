package app

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/learn"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// Environment variables of the learning loop (internal/learn).
const (
	EnvLearn           = "PML_LEARN"            // off: executions carry no pattern and nothing is suggested (default on); CLI too
	EnvSuggestMinRuns  = "PML_SUGGEST_MIN_RUNS" // K: successful runs before a program is suggested (default 3); CLI too
	maxSuggestMinRunsN = 1_000_000
)

// LearnConfig configures the learning loop.
type LearnConfig struct {
	// Off turns it off: no pattern in the traces, no suggestions.
	Off bool
	// MinSuccesses is K (learn.DefaultMinSuccesses when 0).
	MinSuccesses int64
}

// LearnFromEnv reads PML_LEARN and PML_SUGGEST_MIN_RUNS.
func LearnFromEnv() (LearnConfig, error) {
	var c LearnConfig
	switch v := strings.ToLower(os.Getenv(EnvLearn)); v {
	case "", "on":
	case "off":
		c.Off = true
	default:
		return c, fmt.Errorf("%s=%q: want on or off", EnvLearn, v)
	}
	if v := os.Getenv(EnvSuggestMinRuns); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > maxSuggestMinRunsN {
			return c, fmt.Errorf("%s=%q: want a number of runs from 1", EnvSuggestMinRuns, v)
		}
		c.MinSuccesses = n
	}
	return c, nil
}

// LearnStore is where the learning loop's counts are read for a trace
// store: the trace file (or memory) folded, or the aggregator's counters in
// the traces table.
func LearnStore(store tracedb.Store) learn.Store {
	switch s := store.(type) {
	case *tracedb.Memory:
		return &learn.Local{Each: s.Learned}
	case *tracedb.Dynamo:
		db, table := s.Counters()
		return learn.Dynamo{DB: db, Table: table}
	}
	return nil
}

// PublishSuggestion proposes a suggestion as a capability, on the guarded
// path every save takes: the decider's publication where the policy lets
// it publish (an approver; the caller where the caller decides), a draft
// waiting for someone who may otherwise. A suggestion is a proposal, never
// a publication of its own.
func PublishSuggestion(ctx context.Context, g *capability.Guard, d approval.Decider, s learn.Suggestion) (capability.Outcome, error) {
	return g.Submit(ctx, d, d.Principal, capability.Proposal{Name: s.Name, Code: s.Code, Description: s.Description, InputSchema: s.InputSchema})
}

// suggestionsAPI serves the learning loop to the HTTP routes and MCP
// tools: a principal sees the candidates it ran, made of its own runs
// (an approver too: another's program reaches it as a draft).
type suggestionsAPI struct {
	store learn.Store
	min   int64
	guard *capability.Guard
}

func (s suggestionsAPI) viewer(principal string) learn.Viewer {
	return learn.Viewer{Principal: principal}
}

func (s suggestionsAPI) List(ctx context.Context, principal string) (any, error) {
	return learn.Suggestions(ctx, s.store, learn.Query{Viewer: s.viewer(principal), MinSuccesses: s.min})
}

func (s suggestionsAPI) Publish(ctx context.Context, principal, id, name string) (any, error) {
	sug, err := learn.Proposal(ctx, s.store, id, s.viewer(principal), name, s.min)
	if err != nil {
		return nil, err
	}
	return PublishSuggestion(ctx, s.guard, approval.Decider{Principal: principal, Channel: execution.ChannelCaller}, sug)
}
