package guest_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// TestDeepValuesAreTheScriptsFault: a value the script hands the host
// nested deeper than guest.MaxJSONDepth (its result, a tool call's
// arguments, a host error it rethrows with new details) is refused as
// LIMIT_EXCEEDED (json_depth). Before, Go's decoder failed on the output
// past 10,000 levels and the caller got the host's SANDBOX_ERROR.
func TestDeepValuesAreTheScriptsFault(t *testing.T) {
	nest := func(open string, depth int) string {
		return "let o = null; for (let i = 0; i < " + strconv.Itoa(depth) + "; i++) o = " + open + "\n"
	}
	tests := []struct {
		name, code string
		fails      fault.Code // "" when the run must succeed with want
		limit      string
		want       string
	}{
		{"a result at the limit", nest("[o]", guest.MaxJSONDepth-1) + "return [o]", "", "", strings.Repeat("[", guest.MaxJSONDepth) + "null" + strings.Repeat("]", guest.MaxJSONDepth)},
		{"a result past the limit", nest("[o]", guest.MaxJSONDepth) + "return [o]", fault.LimitExceeded, fault.LimitJSONDepth, ""},
		{"a result past Go's decoder", nest("{o}", 10500) + "return o", fault.LimitExceeded, fault.LimitJSONDepth, ""},
		{"brackets inside strings", `return ['['.repeat(20000), '\\"[[[', '{'.repeat(5000) + '"']`, "", "", `["` + strings.Repeat("[", 20000) + `", "\\\"[[[", "` + strings.Repeat("{", 5000) + `\""]`},
		{"tool arguments at the limit", nest("[o]", guest.MaxJSONDepth-2) + "const r = await mcp.demo.echo({o}); let d = 0; for (let x = r.o; x; x = x[0]) d++; return d", "", "", "998"},
		{"tool arguments past the limit", nest("[o]", guest.MaxJSONDepth) + "return await mcp.demo.echo({o})", fault.LimitExceeded, fault.LimitJSONDepth, ""},
		{"tool arguments past the limit, caught", nest("[o]", 10500) + "try { await mcp.demo.echo({o}) } catch (e) { return [e.code, e.limit, e.tool] }", "", "", `["LIMIT_EXCEEDED", "json_depth", "demo:echo"]`},
		{"a host error rethrown with deep details", nest("[o]", 10500) + "try { await mcp.demo.fail({}) } catch (e) { e.details = o; throw e }", fault.LimitExceeded, fault.LimitJSONDepth, ""},
		{"a deep value logged", nest("[o]", 10500) + "console.log(o); console.log(JSON.stringify(o).length); return 1", "", "", "1"},
		{"a deep value thrown", nest("[o]", 10500) + "throw o", fault.ScriptError, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.code)
			if tt.fails == "" {
				mustOK(t, r)
				jsonEq(t, r.Value, tt.want)
				return
			}
			if r.OK || r.Err.Code != tt.fails || r.Err.Limit != tt.limit {
				t.Fatalf("want %s (%s), got %+v", tt.fails, tt.limit, r.Err)
			}
		})
	}
}
