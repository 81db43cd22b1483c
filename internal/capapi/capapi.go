// Package capapi is what PML Sandbox's front ends — the REST API's
// /capabilities routes and the MCP server's save_capability,
// list_capabilities and search_tools — ask of the deployment's
// capabilities: the registry under the policy (Capabilities), the learning
// loop's suggestions (Suggestions), the search ranker (Ranker), and the
// save request both fronts decode alike. The wiring (internal/app) hands
// both fronts the same implementations.
package capapi

import (
	"context"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// CapabilitySave is a request to store a capability: POST /capabilities'
// body, save_capability's arguments.
type CapabilitySave = capability.Proposal

// DecodeCapabilitySave reads a capability to save, as strictly as an
// execute request (POST /capabilities, save_capability's arguments).
func DecodeCapabilitySave(data []byte) (CapabilitySave, *fault.Error) {
	var c CapabilitySave
	if ferr := execution.DecodeStrict(data, &c, "a capability"); ferr != nil {
		return CapabilitySave{}, ferr
	}
	return c, nil
}

// Capabilities lists capabilities and publishes them as the deployment's
// policy decides (capability.Guard implements it): a save its caller may not publish is
// kept as a draft, which someone who may publishes later. Every method
// takes who asks (the principal API Gateway or the guard verified, and
// how the decision reached the service).
type Capabilities interface {
	// List is every capability's latest version, as principal may see it.
	List(ctx context.Context, principal string) ([]capability.Capability, error)
	// Submit publishes what author proposes as d decides it, or keeps it
	// as author's draft (the fronts' author is the caller: d.Principal).
	Submit(ctx context.Context, d approval.Decider, author string, c CapabilitySave) (capability.Outcome, error)
	// Drafts are the drafts principal may read (pending ones, or all
	// unexpired ones); Draft is one of them.
	Drafts(ctx context.Context, principal string, all bool) ([]capability.Draft, error)
	Draft(ctx context.Context, principal, id string) (capability.Draft, error)
	// PublishDraft publishes a draft as d decides it; RejectDraft closes
	// it (its author withdraws it, whoever may publish it rejects it).
	PublishDraft(ctx context.Context, d approval.Decider, id string) (capability.Outcome, error)
	RejectDraft(ctx context.Context, d approval.Decider, id, reason string) (capability.Draft, error)
	// MayPublishDraft reports whether d's decision would publish dr now.
	MayPublishDraft(ctx context.Context, d approval.Decider, dr capability.Draft) (bool, error)
}

// CallerDecider is who decides a request made with the caller's own
// credentials: the policy weighs a decision by the channel it came
// through, and the caller's is not its client's user's nor the page's.
func CallerDecider(ctx context.Context) approval.Decider {
	return approval.Decider{Principal: execution.PrincipalFrom(ctx), Channel: execution.ChannelCaller}
}

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
// their descriptions (internal/ranking.Ranker); without one, search is
// lexical.
type Ranker interface {
	Search(ctx context.Context, tools []catalog.Tool, query string, limit int) []catalog.Hit
	Annotate(ctx context.Context, tools []catalog.Tool) []catalog.Tool
}
