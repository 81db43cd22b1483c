package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/pml-sandbox/pml/internal/catalog"
)

// Entity types and actions, as the schema names them.
const (
	typePrincipal  types.EntityType = "PML::Principal"
	typeServer     types.EntityType = "PML::Server"
	typeTool       types.EntityType = "PML::Tool"
	typeArguments  types.EntityType = "PML::Arguments"
	typeExecution  types.EntityType = "PML::Execution"
	typeCapability types.EntityType = "PML::Capability"
	typeDeployment types.EntityType = "PML::Deployment"
	typeAction     types.EntityType = "PML::Action"
)

// Action is one of the schema's actions.
type Action string

// The actions a policy set decides.
const (
	ActionCall        Action = "call"
	ActionApprove     Action = "approve"
	ActionGrant       Action = "grant"
	ActionAnswer      Action = "answer"
	ActionReject      Action = "reject"
	ActionRead        Action = "read"
	ActionPublish     Action = "publish"
	ActionConsent     Action = "consent"
	ActionOversee     Action = "oversee"
	ActionTrustClient Action = "trustClient"
)

// UID is the action's entity.
func (a Action) UID() types.EntityUID { return types.NewEntityUID(typeAction, types.String(a)) }

// Authorizer answers requests: a Set (cedar-go, in process), or Amazon
// Verified Permissions. Implementations are safe for concurrent use.
type Authorizer interface {
	Authorize(ctx context.Context, in Input) (Decision, error)
}

// Input is one request, as Cedar reads it: the principal, action,
// resource and context, and the entities they name.
type Input struct {
	Principal, Action, Resource types.EntityUID
	Context                     types.Record
	Entities                    types.EntityMap
}

// Decision is a policy set's answer.
type Decision struct {
	Allowed bool
	// Policies are the ids of the policies that decided: the forbids
	// that refused, else the permits that allowed; none when nothing
	// permitted (Cedar's default deny).
	Policies []string `json:"policies,omitempty"`
	// Errors are policies that failed to evaluate (Cedar skips them).
	Errors []string `json:"errors,omitempty"`
	// Limits are the limits of the permits that allowed.
	Limits []Limit `json:"-"`
	// Set identifies the policy set that decided (Set.Digest).
	Set string `json:"set,omitempty"`
}

// Why names what decided, for messages: `policy "x"`, `policies "x",
// "y"`, or that no policy permits.
func (d Decision) Why() string {
	switch len(d.Policies) {
	case 0:
		if d.Allowed {
			return "the policy set"
		}
		return "no policy permits it"
	case 1:
		return fmt.Sprintf("policy %q", d.Policies[0])
	}
	q := make([]string, len(d.Policies))
	for i, p := range d.Policies {
		q[i] = strconv.Quote(p)
	}
	return "policies " + strings.Join(q, ", ")
}

func principalUID(s string) types.EntityUID {
	return types.NewEntityUID(typePrincipal, types.String(s))
}

// deploymentUID is the one Deployment entity.
var deploymentUID = types.NewEntityUID(typeDeployment, "pml")

// Decider is who makes a decision and how it reached the service.
type Decider struct {
	Principal string
	// Channel is "caller", "client" or "page" ("" is "caller").
	Channel string
}

func (d Decider) context() types.Record {
	ch := d.Channel
	if ch == "" {
		ch = "caller"
	}
	return types.NewRecord(types.RecordMap{"channel": types.String(ch)})
}

// ExecutionInput asks whether d may take action (approve, answer,
// reject, read) on an execution owner runs.
func ExecutionInput(action Action, d Decider, id, owner string) Input {
	uid := types.NewEntityUID(typeExecution, types.String(id))
	em := entities(d.Principal, owner)
	em[uid] = types.Entity{UID: uid, Attributes: types.NewRecord(types.RecordMap{"owner": principalUID(owner)})}
	return Input{Principal: principalUID(d.Principal), Action: action.UID(), Resource: uid, Context: d.context(), Entities: em}
}

// PublishInput asks whether d may publish a version of capability name
// (namespace:action) that author wrote into a namespace owners have
// published in.
func PublishInput(d Decider, name, author string, owners []string) Input {
	uid := types.NewEntityUID(typeCapability, types.String(name))
	ns, _, _ := strings.Cut(name, ":")
	em := entities(append([]string{d.Principal, author}, owners...)...)
	set := make([]types.Value, len(owners))
	for i, o := range owners {
		set[i] = principalUID(o)
	}
	em[uid] = types.Entity{UID: uid, Attributes: types.NewRecord(types.RecordMap{
		"namespace": types.String(ns), "name": types.String(name), "author": principalUID(author), "owners": types.NewSet(set...)})}
	return Input{Principal: principalUID(d.Principal), Action: ActionPublish.UID(), Resource: uid, Context: d.context(), Entities: em}
}

// DeploymentInput asks whether d may take action (consent, oversee,
// trustClient), which is about no one execution.
func DeploymentInput(action Action, d Decider) Input {
	em := entities(d.Principal)
	em[deploymentUID] = types.Entity{UID: deploymentUID}
	return Input{Principal: principalUID(d.Principal), Action: action.UID(), Resource: deploymentUID, Context: d.context(), Entities: em}
}

// entities holds the Principal entities of principals.
func entities(principals ...string) types.EntityMap {
	em := make(types.EntityMap, len(principals)+2)
	for _, p := range principals {
		uid := principalUID(p)
		if _, ok := em[uid]; !ok {
			em[uid] = principalEntity(p)
		}
	}
	return em
}

// Call is a tool call as the policy set reads it.
type Call struct {
	Principal string
	Tool      catalog.Tool
	// Args are the call's arguments (read only when the set mentions
	// them: WithArgs).
	Args json.RawMessage
	// Source is the front the request came through (execution.Source).
	Source string
	// Consent is the request's allow_destructive, honoured.
	Consent bool
	// Approved: a person approved this very call.
	Approved    bool
	ExecutionID string
	Session     string
	// Chain is the capabilities from the root down to the calling run
	// (empty for a root script).
	Chain []string
	// Uncounted: the call was counted when it was first sent (sent again
	// with the answers to its server's question); limits are not counted
	// again.
	Uncounted bool
}

// maxArgValues bounds the values a call's arguments are read into: a
// call with more is refused where the set reads arguments, rather than
// read in part (a value left out could be the one a forbid looks for).
const maxArgValues = 1024

// CallInput is the request for c. The arguments are read only when
// withArgs (the set mentions them): else context.args has no tags. An
// error is arguments the set cannot read whole (more than maxArgValues
// values, a name given twice, not JSON): the call is to be refused.
func CallInput(c Call, withArgs bool) (Input, error) { return callInput(c, withArgs, nil) }

// callInput is CallInput, taking the principal's and the tool's entities
// from cache when it has them (a Gate's: they are the same for every call
// of an execution, and building them is most of a request's cost).
func callInput(c Call, withArgs bool, cache *entityCache) (Input, error) {
	tool := types.NewEntityUID(typeTool, types.String(c.Tool.FullName()))
	server := types.NewEntityUID(typeServer, types.String(c.Tool.Server))
	args := types.NewEntityUID(typeArguments, "call")
	em := make(types.EntityMap, 4)
	pe := cache.get("p\x00"+c.Principal, func() types.Entity { return principalEntity(c.Principal) })
	em[pe.UID] = pe
	em[server] = cache.get("s\x00"+c.Tool.Server, func() types.Entity {
		return types.Entity{UID: server, Attributes: types.NewRecord(types.RecordMap{"name": types.String(c.Tool.Server)})}
	})
	em[tool] = cache.get(toolKey(c.Tool), func() types.Entity {
		return types.Entity{UID: tool, Parents: types.NewEntityUIDSet(server), Attributes: toolAttrs(c.Tool)}
	})
	var tags types.Record
	if withArgs {
		m, err := argValues(c.Args)
		if err != nil {
			return Input{}, err
		}
		tags = types.NewRecord(m)
	}
	em[args] = types.Entity{UID: args, Tags: tags}
	// The context is the same for every call of a run (the arguments are
	// an entity of their own): kept in the cache as the entities are.
	ctxKey := strings.Join(append([]string{"c", c.Source, c.ExecutionID, c.Session, strconv.FormatBool(c.Consent), strconv.FormatBool(c.Approved)}, c.Chain...), "\x00")
	ctx := cache.get(ctxKey, func() types.Entity { return types.Entity{Attributes: callContext(c, args)} }).Attributes
	return Input{Principal: pe.UID, Action: ActionCall.UID(), Resource: tool, Context: ctx, Entities: em}, nil
}

// callContext is a call's context record; args is its arguments' entity.
func callContext(c Call, args types.EntityUID) types.Record {
	chain := make([]types.Value, len(c.Chain))
	for i, name := range c.Chain {
		chain[i] = types.String(name)
	}
	capability := ""
	if len(c.Chain) > 0 {
		capability = c.Chain[len(c.Chain)-1]
	}
	return types.NewRecord(types.RecordMap{
		"args":       args,
		"source":     types.String(c.Source),
		"consent":    types.Boolean(c.Consent),
		"approved":   types.Boolean(c.Approved),
		"execution":  types.String(c.ExecutionID),
		"session":    types.String(c.Session),
		"capability": types.String(capability),
		"chain":      types.NewSet(chain...),
		"depth":      types.Long(len(c.Chain)),
	})
}

// toolKey names a tool's entity in a cache: everything toolAttrs reads.
func toolKey(t catalog.Tool) string {
	a := t.Annotations
	flag := func(b *bool) byte {
		switch {
		case b == nil:
			return '-'
		case *b:
			return '1'
		}
		return '0'
	}
	req := flag(&t.RequireApproval)
	return "t\x00" + t.FullName() + "\x00" + t.SourceKind + "\x00" + string(t.Kind) + "\x00" +
		string([]byte{flag(a.ReadOnly), flag(a.Destructive), flag(a.Idempotent), flag(a.OpenWorld), req})
}

// entityCache keeps entities built for requests, by key; bounded (it
// starts over when full). The nil cache builds every time.
type entityCache struct {
	mu sync.Mutex
	m  map[string]types.Entity
}

// maxCached bounds an entityCache.
const maxCached = 4096

func (c *entityCache) get(key string, build func() types.Entity) types.Entity {
	if c == nil {
		return build()
	}
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return e
	}
	e = build()
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCached {
		c.m = make(map[string]types.Entity)
	}
	c.m[key] = e
	c.mu.Unlock()
	return e
}

// toolAttrs are a tool's attributes: what it is, by its annotations as
// the host reads them (catalog.Tool).
func toolAttrs(t catalog.Tool) types.Record {
	a := t.Annotations
	kind := t.SourceKind
	if kind == "" {
		kind = string(t.Kind) // a capability, a built-in
	}
	return types.NewRecord(types.RecordMap{
		"server":          types.String(t.Server),
		"name":            types.String(t.Name),
		"kind":            types.String(kind),
		"destructive":     types.Boolean(t.IsDestructive()),
		"readOnly":        types.Boolean(a.ReadOnly != nil && *a.ReadOnly),
		"idempotent":      types.Boolean(a.Idempotent != nil && *a.Idempotent),
		"openWorld":       types.Boolean(a.OpenWorld == nil || *a.OpenWorld),
		"requireApproval": types.Boolean(t.RequireApproval),
	})
}

// argValues reads a call's arguments into tags by path: a top-level
// name ("petId"), a nested one joined by dots ("body.amount"), an array's
// element by its index ("items.0"). Every scalar gets a tag; so does each
// top-level object or array, as its JSON text. A name given twice, or two
// names that make the same path ({"a.b": 1, "a": {"b": 2}}), is an error:
// the policy and the tool could read different values.
func argValues(raw json.RawMessage) (types.RecordMap, error) {
	out := types.RecordMap{}
	if len(raw) == 0 {
		return out, nil
	}
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, fmt.Errorf("the arguments are not JSON: %w", err)
	}
	if tok.Kind() != '{' {
		return out, nil // not an object: nothing by name
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, fmt.Errorf("the arguments are not JSON: %w", err)
		}
		name := tok.String() // the token is void after the next read
		if dec.PeekKind() == '{' || dec.PeekKind() == '[' {
			v, err := dec.ReadValue()
			if err != nil {
				return nil, fmt.Errorf("the arguments are not JSON: %w", err)
			}
			if err := put(out, name, types.NewRecord(types.RecordMap{"text": types.String(v)})); err != nil {
				return nil, err
			}
			if err := flatten(out, name, v); err != nil {
				return nil, err
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("the arguments are not JSON: %w", err)
		}
		if err := put(out, name, scalar(v)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// flatten adds the scalars inside the object or array v under prefix.
func flatten(out types.RecordMap, prefix string, v jsontext.Value) error {
	dec := jsontext.NewDecoder(bytes.NewReader(v))
	var walk func(path string) error
	walk = func(path string) error {
		switch dec.PeekKind() {
		case '{':
			if _, err := dec.ReadToken(); err != nil {
				return err
			}
			for dec.PeekKind() != '}' {
				name, err := dec.ReadToken()
				if err != nil {
					return err
				}
				if err := walk(path + "." + name.String()); err != nil {
					return err
				}
			}
			_, err := dec.ReadToken()
			return err
		case '[':
			if _, err := dec.ReadToken(); err != nil {
				return err
			}
			for i := 0; dec.PeekKind() != ']'; i++ {
				if err := walk(path + "." + strconv.Itoa(i)); err != nil {
					return err
				}
			}
			_, err := dec.ReadToken()
			return err
		}
		s, err := dec.ReadValue()
		if err != nil {
			return err
		}
		return put(out, path, scalar(s))
	}
	return walk(prefix)
}

// put adds one value, refusing a path already read and more than
// maxArgValues.
func put(out types.RecordMap, path string, v types.Record) error {
	if _, dup := out[types.String(path)]; dup {
		return fmt.Errorf("the arguments name %q twice (or by two spellings): a policy and the tool could read different values", path)
	}
	if len(out) >= maxArgValues {
		return fmt.Errorf("the arguments hold more than %d values, more than a policy reads", maxArgValues)
	}
	out[types.String(path)] = v
	return nil
}

// looksInteger reports whether s is a sign and digits only (what
// strconv.ParseInt reads in base 10), so that text that is not a number
// costs no parse error.
func looksInteger(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// scalar is the Value of one JSON scalar.
func scalar(v jsontext.Value) types.Record {
	m := types.RecordMap{}
	switch v.Kind() {
	case '"':
		b, _ := jsontext.AppendUnquote(nil, v)
		s := string(b)
		m["text"] = types.String(s)
		if looksInteger(s) {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				m["long"] = types.Long(n)
			}
		}
	case '0':
		m["text"] = types.String(v)
		if looksInteger(string(v)) {
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				m["long"] = types.Long(n)
			}
		} else if f, err := strconv.ParseFloat(string(v), 64); err == nil && f == float64(int64(f)) && f >= -1<<63 && f < 1<<63 {
			m["long"] = types.Long(int64(f))
		}
	case 't', 'f':
		m["text"] = types.String(v)
		m["bool"] = types.Boolean(v.Kind() == 't')
	default:
		m["text"] = types.String(v)
	}
	return types.NewRecord(m)
}
