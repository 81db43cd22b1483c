package samcheck

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/policy/source"
	"github.com/pml-sandbox/pml/internal/policy/usage"
)

// TestPolicySetPolicies: both functions make calls, so both are given the
// policy set and count its limits: exactly usage.DynamoAPI's action on
// the limits table (no other function touches it), the source's read
// (S3 GetObject, SSM GetParameter) only where PolicySource names that
// source, and Verified Permissions' IsAuthorized on one store only where
// it evaluates.
func TestPolicySetPolicies(t *testing.T) {
	tpl, err := loadFile(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	want := methods(reflect.TypeFor[usage.DynamoAPI](), "dynamodb", nil)
	for id, got := range actionsOn(tpl, "LimitsTable") {
		need := want
		if id != "ExecuteFunction" && id != "CapabilityFunction" {
			need = nil
		}
		if !slices.Equal(got, need) {
			t.Errorf("%s may %v on the limits table; it needs exactly %v", id, got, need)
		}
	}
	s3Read := methods(reflect.TypeFor[source.S3API](), "s3", nil)
	ssmRead := methods(reflect.TypeFor[source.SSMAPI](), "ssm", nil)
	seen := map[string]map[string]bool{}
	for _, st := range statements(tpl) {
		var cond string
		switch {
		case slices.Equal(st.actions, s3Read):
			cond = "PolicyFromS3"
		case slices.Equal(st.actions, ssmRead) && strings.Contains(st.resource, "PolicySource"):
			cond = "PolicyFromSsm"
		case slices.Equal(st.actions, []string{"verifiedpermissions:IsAuthorized"}):
			cond = "UseVerifiedPermissions"
			if !strings.Contains(st.resource, "policy-store/${PolicyStoreId}") {
				t.Errorf("%s: IsAuthorized on %s; want the one store", st.fn, st.resource)
			}
		default:
			if slices.ContainsFunc(st.actions, func(a string) bool {
				return strings.HasPrefix(a, "s3:") || strings.HasPrefix(a, "verifiedpermissions:")
			}) {
				t.Errorf("%s: %v on %s", st.fn, st.actions, st.resource)
			}
			continue
		}
		if st.cond != cond {
			t.Errorf("%s: %v under condition %q; want %q", st.fn, st.actions, st.cond, cond)
		}
		if seen[st.fn] == nil {
			seen[st.fn] = map[string]bool{}
		}
		seen[st.fn][cond] = true
	}
	for _, fn := range []string{"ExecuteFunction", "CapabilityFunction"} {
		if len(seen[fn]) != 3 {
			t.Errorf("%s reads the policy set from %v; want S3, SSM and Verified Permissions, each where chosen", fn, seen[fn])
		}
	}
	env, _ := tpl.globals["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	for _, name := range []string{app.EnvPolicy, app.EnvPolicyReload, app.EnvPolicyAVPStore, app.EnvLimitsTable} {
		if vars[name] == nil {
			t.Errorf("Globals set no %s", name)
		}
	}
}
