package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/trace"
)

const policyUsage = `usage: pml policy check FILE...          validate policy files against the schema
       pml policy print [FILE]             the default set generated from the switches (or FILE, parsed)
       pml policy print --schema           the Cedar schema policies are validated against
       pml policy test FILE CASES          run a table of requests against FILE (docs/POLICY.md)
       pml policy explain EXECUTION_ID     which policies decided an execution's calls and decisions
`

// policyCmd is `pml policy`: the operator's tools for a policy set.
func policyCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	if len(args) == 0 {
		io.WriteString(errOut, policyUsage)
		return ExitUsage, usagef("give a subcommand: check, print, test or explain")
	}
	switch args[0] {
	case "check":
		return policyCheck(args[1:], out, errOut)
	case "print":
		return policyPrint(args[1:], out, errOut)
	case "test":
		return policyTest(ctx, args[1:], out, errOut)
	case "explain":
		return policyExplain(ctx, args[1:], out, errOut)
	case "-h", "--help", "help":
		io.WriteString(errOut, policyUsage)
		return ExitOK, flag.ErrHelp
	}
	io.WriteString(errOut, policyUsage)
	return ExitUsage, usagef("unknown subcommand %q", args[0])
}

// loadPolicyFile parses and validates one policy file.
func loadPolicyFile(path string) (*policy.Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return policy.Parse(path, b)
}

// policyCheck validates each file: exit 0 only when all load.
func policyCheck(args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("policy check", errOut)
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	if fs.NArg() == 0 {
		return ExitUsage, usagef("give the policy files to check")
	}
	failed := 0
	for _, path := range fs.Args() {
		s, err := loadPolicyFile(path)
		if err != nil {
			failed++
			fmt.Fprintln(out, err)
			continue
		}
		fmt.Fprintf(out, "%s: ok, %d policies (digest %s)\n", path, s.Len(), s.Digest())
	}
	if failed > 0 {
		return ExitFailed, fmt.Errorf("%d of %d policy files failed", failed, fs.NArg())
	}
	return ExitOK, nil
}

// switchFlags are the switches the default set is generated from.
type switchFlags struct {
	approvers, trustedClients, selfApproval, callerDecides string
}

func (f *switchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.approvers, "approvers", os.Getenv(app.EnvApprovers), "approver patterns (default $"+app.EnvApprovers+")")
	fs.StringVar(&f.trustedClients, "trusted-clients", os.Getenv(app.EnvTrustedClients), "trusted client patterns (default $"+app.EnvTrustedClients+")")
	fs.StringVar(&f.selfApproval, "self-approval", cmp.Or(os.Getenv(app.EnvSelfApproval), "off"), "on or off (default $"+app.EnvSelfApproval+", else off)")
	fs.StringVar(&f.callerDecides, "caller-decides", cmp.Or(os.Getenv(app.EnvCallerDecides), "off"),
		"on or off (default $"+app.EnvCallerDecides+", else off: the deployment's; pml run and pml serve on loopback have it on)")
}

func (f *switchFlags) defaultSet() (*policy.Set, error) {
	p, err := app.PolicyOf(f.approvers, f.trustedClients)
	if err != nil {
		return nil, usageError{err}
	}
	if p.CallerDecides, err = app.OnOff("--caller-decides", f.callerDecides, false); err != nil {
		return nil, usageError{err}
	}
	if p.SelfApproval, err = app.OnOff("--self-approval", f.selfApproval, false); err != nil {
		return nil, usageError{err}
	}
	return policy.DefaultSet(p.Switches())
}

// policyPrint prints the default set the switches generate, a file's
// policies as parsed, or the schema.
func policyPrint(args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("policy print", errOut)
	var sf switchFlags
	sf.register(fs)
	schema := fs.Bool("schema", false, "print the Cedar schema instead")
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	switch {
	case *schema:
		_, err := out.Write(policy.Schema())
		return ExitOK, err
	case fs.NArg() > 1:
		return ExitUsage, usagef("give at most one policy file")
	case fs.NArg() == 1:
		s, err := loadPolicyFile(fs.Arg(0))
		if err != nil {
			return ExitFailed, err
		}
		for _, p := range s.Policies() {
			fmt.Fprintf(out, "// %s (%s)\n%s\n\n", p.ID, p.Position, p.Text)
		}
		return ExitOK, nil
	}
	s, err := sf.defaultSet()
	if err != nil {
		return ExitUsage, err
	}
	_, err = out.Write(s.Text())
	return ExitOK, err
}

// policyCase is one row of a `pml policy test` table.
type policyCase struct {
	Name      string `yaml:"name"`
	Principal string `yaml:"principal"`
	// Action is call, approve, answer, reject, read, publish, consent,
	// oversee or trustClient.
	Action string `yaml:"action"`
	// A call's tool ("server:name") and what it is.
	Tool            string `yaml:"tool"`
	Kind            string `yaml:"kind"`
	ReadOnly        bool   `yaml:"read_only"`
	Destructive     *bool  `yaml:"destructive"`
	Idempotent      bool   `yaml:"idempotent"`
	RequireApproval bool   `yaml:"require_approval"`
	// A call's arguments and facts.
	Args     any      `yaml:"args"`
	Source   string   `yaml:"source"`
	Consent  bool     `yaml:"consent"`
	Approved bool     `yaml:"approved"`
	Session  string   `yaml:"session"`
	Chain    []string `yaml:"chain"`
	// A decision's channel (caller, client, page), the execution's owner,
	// a publication's capability, author and namespace owners.
	Channel    string   `yaml:"channel"`
	Owner      string   `yaml:"owner"`
	Capability string   `yaml:"capability"`
	Author     string   `yaml:"author"`
	Owners     []string `yaml:"owners"`
	// Expect is allow or deny (a call also ask: a person would decide);
	// Policies, when given, are the ids that must decide.
	Expect   string   `yaml:"expect"`
	Policies []string `yaml:"policies"`
}

// policyTest runs a table of cases against a policy file.
func policyTest(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("policy test", errOut)
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	if fs.NArg() != 2 {
		return ExitUsage, usagef("give a policy file and a file of cases: pml policy test FILE CASES")
	}
	s, err := loadPolicyFile(fs.Arg(0))
	if err != nil {
		return ExitFailed, err
	}
	b, err := os.ReadFile(fs.Arg(1))
	if err != nil {
		return ExitUsage, usageError{err}
	}
	var doc struct {
		Cases []policyCase `yaml:"cases"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return ExitUsage, usagef("%s: %v", fs.Arg(1), err)
	}
	failed := 0
	for i, c := range doc.Cases {
		name := cmp.Or(c.Name, fmt.Sprintf("case %d", i+1))
		got, ids, err := runCase(ctx, s, c)
		want := c.Expect
		switch {
		case err != nil:
			failed++
			fmt.Fprintf(out, "FAIL %s: %v\n", name, err)
		case got != want:
			failed++
			fmt.Fprintf(out, "FAIL %s: %s (%s); want %s\n", name, got, strings.Join(ids, ", "), want)
		case c.Policies != nil && !slices.Equal(sorted(c.Policies), sorted(ids)):
			failed++
			fmt.Fprintf(out, "FAIL %s: %s by %q; want by %q\n", name, got, ids, c.Policies)
		default:
			fmt.Fprintf(out, "ok   %s: %s (%s)\n", name, got, strings.Join(ids, ", "))
		}
	}
	fmt.Fprintf(out, "%d cases, %d failed\n", len(doc.Cases), failed)
	if failed > 0 {
		return ExitFailed, fmt.Errorf("%d of %d cases failed", failed, len(doc.Cases))
	}
	return ExitOK, nil
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// runCase evaluates one case: allow, deny or ask, and the policies that
// decided. Limits are not counted: a case asks what the rules say.
func runCase(ctx context.Context, s *policy.Set, c policyCase) (string, []string, error) {
	switch c.Expect {
	case "allow", "deny", "ask":
	default:
		return "", nil, fmt.Errorf("expect must be allow, deny or ask, not %q", c.Expect)
	}
	d := policy.Decider{Principal: c.Principal, Channel: c.Channel}
	var in policy.Input
	switch a := policy.Action(c.Action); a {
	case policy.ActionCall:
		call, err := caseCall(c)
		if err != nil {
			return "", nil, err
		}
		out := (&policy.Gate{Rules: s, Counter: uncounted{}}).Check(ctx, call)
		ids := out.Decision.Policies
		switch out.Verdict {
		case policy.Allow:
			return "allow", ids, nil
		case policy.Ask:
			return "ask", ids, nil
		}
		if out.Reason != "" {
			ids = append(ids, out.Reason)
		}
		return "deny", ids, nil
	case policy.ActionApprove, policy.ActionGrant, policy.ActionAnswer, policy.ActionReject, policy.ActionRead:
		in = policy.ExecutionInput(a, d, "case", c.Owner)
	case policy.ActionPublish:
		in = policy.PublishInput(d, c.Capability, c.Author, c.Owners)
	case policy.ActionConsent, policy.ActionOversee, policy.ActionTrustClient:
		in = policy.DeploymentInput(a, d)
	default:
		return "", nil, fmt.Errorf("unknown action %q", c.Action)
	}
	dec, err := s.Authorize(ctx, in)
	if err != nil {
		return "", nil, err
	}
	if dec.Allowed {
		return "allow", dec.Policies, nil
	}
	return "deny", dec.Policies, nil
}

// caseCall is the call a case describes.
func caseCall(c policyCase) (policy.Call, error) {
	server, name, ok := strings.Cut(c.Tool, ":")
	if !ok || server == "" || name == "" {
		return policy.Call{}, fmt.Errorf("a call's tool is server:name, not %q", c.Tool)
	}
	t := catalog.Tool{Server: server, Name: name, Kind: trace.KindMCP, SourceKind: cmp.Or(c.Kind, "mcp"), RequireApproval: c.RequireApproval}
	if c.Kind == string(trace.KindCapability) {
		t.Kind, t.SourceKind = trace.KindCapability, ""
	}
	ro, idem := c.ReadOnly, c.Idempotent
	t.Annotations = catalog.Annotations{ReadOnly: &ro, Destructive: c.Destructive, Idempotent: &idem}
	args, err := json.Marshal(c.Args)
	if err != nil {
		return policy.Call{}, fmt.Errorf("args: %w", err)
	}
	return policy.Call{Principal: c.Principal, Tool: t, Args: args, Source: cmp.Or(c.Source, "cli"), Consent: c.Consent,
		Approved: c.Approved, Session: c.Session, Chain: c.Chain, ExecutionID: "case"}, nil
}

// uncounted lets every limit through: a test case asks what the rules
// say, not what has been spent.
type uncounted struct{}

// Add implements policy.Counter: always added.
func (uncounted) Add(context.Context, policy.CountKey, int64, int64) (int64, bool, error) {
	return 0, true, nil
}

// policyExplain shows which policies decided an execution's calls and the
// decisions made on it, from its trace, with their text in the set the
// flags name.
func policyExplain(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("policy explain", errOut)
	var st storeFlags
	st.register(fs)
	var sf switchFlags
	sf.register(fs)
	file := fs.String("policy", os.Getenv(app.EnvPolicy), "the policy set to show the policies of (default $"+app.EnvPolicy+", else the default set the switches generate)")
	callID := fs.Int("call", 0, "only this call")
	id, err := parseID(fs, args)
	if err != nil {
		return ExitUsage, err
	}
	var s *policy.Set
	if *file != "" {
		s, err = loadPolicyFile(*file)
	} else {
		s, err = sf.defaultSet()
	}
	if err != nil {
		return ExitFailed, err
	}
	cfg, err := st.traceConfig()
	if err != nil {
		return ExitUsage, err
	}
	store, err := app.OpenTraces(ctx, cfg, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	ex, calls, err := store.GetExecution(ctx, id)
	if err != nil {
		return ExitFailed, err
	}
	type explained struct {
		policy.Info
		Missing string `json:"missing,omitempty"`
	}
	explain := func(ids []string) []explained {
		out := make([]explained, 0, len(ids))
		for _, pid := range ids {
			if in, ok := s.Policy(pid); ok {
				out = append(out, explained{Info: in})
				continue
			}
			out = append(out, explained{Info: policy.Info{ID: pid}, Missing: "not in the set shown (" + s.Origin() + "): it has changed since, or another set decided"})
		}
		return out
	}
	type callDoc struct {
		CallID    int         `json:"call_id"`
		Tool      string      `json:"tool"`
		OK        bool        `json:"ok"`
		ErrorCode string      `json:"error_code,omitempty"`
		Status    string      `json:"status,omitempty"`
		Policies  []explained `json:"policies"`
	}
	type eventDoc struct {
		Type      string           `json:"type"`
		Principal string           `json:"principal,omitempty"`
		Via       string           `json:"via,omitempty"`
		Decisions []trace.Decision `json:"decisions,omitempty"`
		Policies  []explained      `json:"policies"`
	}
	doc := struct {
		ExecutionID string     `json:"execution_id"`
		Principal   string     `json:"principal,omitempty"`
		Set         string     `json:"set"`
		Calls       []callDoc  `json:"calls"`
		Decisions   []eventDoc `json:"decisions"`
	}{ExecutionID: id, Principal: ex.Principal, Set: s.Origin() + " (digest " + s.Digest() + ")", Calls: []callDoc{}, Decisions: []eventDoc{}}
	for _, c := range calls {
		if *callID != 0 && c.CallID != *callID {
			continue
		}
		doc.Calls = append(doc.Calls, callDoc{CallID: c.CallID, Tool: c.Server + ":" + c.Tool, OK: c.OK, ErrorCode: string(c.ErrorCode),
			Status: c.Status, Policies: explain(c.Policies)})
	}
	if *callID != 0 && len(doc.Calls) == 0 {
		return ExitFailed, errors.New("the execution has no such call")
	}
	for _, e := range ex.Events {
		if e.Type == trace.EventSuspend {
			continue
		}
		doc.Decisions = append(doc.Decisions, eventDoc{Type: e.Type, Principal: e.Principal, Via: e.Via, Decisions: e.Decisions, Policies: explain(e.Policies)})
	}
	return ExitOK, writeJSON(out, doc)
}
