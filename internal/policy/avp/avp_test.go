package avp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/verifiedpermissions"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/policy/avp"
	"github.com/pml-sandbox/pml/internal/testutil/avpstandin"
)

const rules = `
@id("reads") permit (principal, action == PML::Action::"call", resource in PML::Server::"pets") when { resource.readOnly };
@id("unprotected-deletes") permit (principal, action == PML::Action::"call", resource == PML::Tool::"pets:deletePet")
when { context.args.hasTag("petId") && context.args.getTag("petId") has long && context.args.getTag("petId").long >= 100 };
@id("ops-approve") permit (principal, action == PML::Action::"approve", resource)
when { principal.kind == "arn" && principal.account == "123456789012" && principal.role == "ops" && principal != resource.owner };
`

// TestVerifiedPermissions: the SDK's IsAuthorized, through its endpoint
// override, to a stand-in holding the same set: every answer is the
// in-process set's, for calls (arguments as tags included) and decisions.
func TestVerifiedPermissions(t *testing.T) {
	set, err := policy.Parse("store.cedar", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	stand := avpstandin.Start(t, "ps-1", set)
	client := verifiedpermissions.NewFromConfig(aws.Config{Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", "")},
		func(o *verifiedpermissions.Options) { o.BaseEndpoint = aws.String(stand.URL) })
	a := &avp.Authorizer{API: client, PolicyStoreID: "ps-1"}
	ro, rw := true, false
	get := catalog.Tool{Server: "pets", Name: "getPetById", Annotations: catalog.Annotations{ReadOnly: &ro}}
	del := catalog.Tool{Server: "pets", Name: "deletePet", Annotations: catalog.Annotations{ReadOnly: &rw}}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		tool catalog.Tool
		args string
		want bool
	}{
		{"a read", get, `{"petId": 1}`, true},
		{"an unprotected delete", del, `{"petId": 150}`, true},
		{"a protected delete", del, `{"petId": 5}`, false},
		{"a delete by a path parameter's text", del, `{"petId": "150"}`, true},
	} {
		in, err := policy.CallInput(policy.Call{Principal: "jwt:https://idp#agent", Tool: tc.tool, Args: []byte(tc.args)}, true)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Authorize(ctx, in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		local, _ := set.Authorize(ctx, in)
		if got.Allowed != tc.want || strings.Join(got.Policies, ",") != strings.Join(local.Policies, ",") {
			t.Errorf("%s: %+v; in process %+v", tc.name, got, local)
		}
	}
	// The approval policy's decisions, through Verified Permissions.
	p := approval.Policy{Rules: a, Custom: true}
	ops := "arn:aws:sts::123456789012:assumed-role/ops/alice"
	if !p.MayApprove(approval.Decider{Principal: ops, Channel: execution.ChannelPage}, "jwt:https://idp#agent") {
		t.Error("ops may not approve")
	}
	if p.MayApprove(approval.Decider{Principal: "jwt:https://idp#agent", Channel: execution.ChannelPage}, "jwt:https://idp#agent") {
		t.Error("the agent approved its own")
	}
	if stand.Calls.Load() < 6 {
		t.Errorf("%d requests reached the stand-in", stand.Calls.Load())
	}
	// A store that does not exist is an error, which refuses.
	bad := &avp.Authorizer{API: client, PolicyStoreID: "ps-missing"}
	if _, err := bad.Authorize(ctx, policy.DeploymentInput(policy.ActionConsent, policy.Decider{Principal: ops})); err == nil {
		t.Error("an unknown store answered")
	}
	if (approval.Policy{Rules: bad}).MayConsent(ops) {
		t.Error("an unreachable store's refusal let a decision through")
	}
}
