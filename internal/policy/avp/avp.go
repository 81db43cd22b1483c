// Package avp evaluates a deployment's policy requests with Amazon Verified
// Permissions (IsAuthorized) instead of in process: for operators who keep
// their Cedar policies in a Verified Permissions policy store, with its
// schema (internal/policy.Schema) and its audit trail. cedar-go in process
// stays the default: no network on the hot path.
//
// Requests go as Cedar's own JSON (entities and context in the cedarJson
// form), so what Verified Permissions evaluates is exactly what the
// in-process set would. What it answers names its own policy ids, and
// carries no annotations: limits (@limit, @sum) are counted only under
// the in-process set.
package avp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/verifiedpermissions"
	vptypes "github.com/aws/aws-sdk-go-v2/service/verifiedpermissions/types"
	"github.com/cedar-policy/cedar-go/types"

	"github.com/pml-sandbox/pml/internal/policy"
)

// API is the part of the Verified Permissions client an Authorizer uses.
type API interface {
	IsAuthorized(ctx context.Context, in *verifiedpermissions.IsAuthorizedInput, opts ...func(*verifiedpermissions.Options)) (*verifiedpermissions.IsAuthorizedOutput, error)
}

// Authorizer is a policy.Authorizer backed by a Verified Permissions
// policy store. Its errors refuse (the caller denies what it cannot ask).
type Authorizer struct {
	API           API
	PolicyStoreID string
}

// Authorize implements policy.Authorizer.
func (a *Authorizer) Authorize(ctx context.Context, in policy.Input) (policy.Decision, error) {
	entities, err := json.Marshal(in.Entities)
	if err != nil {
		return policy.Decision{}, fmt.Errorf("avp: encoding the entities: %w", err)
	}
	cx, err := json.Marshal(in.Context)
	if err != nil {
		return policy.Decision{}, fmt.Errorf("avp: encoding the context: %w", err)
	}
	out, err := a.API.IsAuthorized(ctx, &verifiedpermissions.IsAuthorizedInput{
		PolicyStoreId: aws.String(a.PolicyStoreID),
		Principal:     identifier(in.Principal),
		Action:        &vptypes.ActionIdentifier{ActionType: aws.String(string(in.Action.Type)), ActionId: aws.String(string(in.Action.ID))},
		Resource:      identifier(in.Resource),
		Context:       &vptypes.ContextDefinitionMemberCedarJson{Value: string(cx)},
		Entities:      &vptypes.EntitiesDefinitionMemberCedarJson{Value: string(entities)},
	})
	if err != nil {
		return policy.Decision{}, fmt.Errorf("avp: IsAuthorized: %w", err)
	}
	d := policy.Decision{Allowed: out.Decision == vptypes.DecisionAllow, Set: "avp:" + a.PolicyStoreID}
	for _, p := range out.DeterminingPolicies {
		d.Policies = append(d.Policies, aws.ToString(p.PolicyId))
	}
	for _, e := range out.Errors {
		d.Errors = append(d.Errors, aws.ToString(e.ErrorDescription))
	}
	return d, nil
}

// ReadsArgs implements policy.ArgsReader: the store's policies are not
// known here, so the arguments always go.
func (a *Authorizer) ReadsArgs() bool { return true }

func identifier(uid types.EntityUID) *vptypes.EntityIdentifier {
	return &vptypes.EntityIdentifier{EntityType: aws.String(string(uid.Type)), EntityId: aws.String(string(uid.ID))}
}
