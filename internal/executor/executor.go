// Package executor is the execution service: it takes an execution request
// from any front end (CLI, Lambda events, the MCP endpoint), resolves the
// tool set, checks the code statically, runs it in a fresh sandbox and
// serves its tool calls — validated, routed to MCP servers or capabilities,
// and traced.
package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/js/script"
	"github.com/pml-sandbox/pml/internal/learn"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/ranking"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// Options configure a Service.
type Options struct {
	// Sources, in priority order: when two offer the same server:tool, the
	// first wins (MCP servers before capabilities, as ADR-052 resolves).
	Sources []execution.ToolSource
	// Sink receives a record of every execution (may be nil).
	Sink trace.Sink
	// Logger for service diagnostics (default slog.Default()).
	Logger *slog.Logger
	// MaxTimeout caps Request.TimeoutMS (default 60 s).
	MaxTimeout time.Duration
	// Limits apply to every execution (zero fields: engine defaults).
	Limits guest.Limits
	// Sandboxes bounds the capability runs one request tree may start
	// (default execution.DefaultSandboxes); a capability run gets at most what its
	// caller handed down.
	Sandboxes int
	// Drops logs the tools the catalog leaves out. Services built alike
	// (a capability run gets a fresh one) should share one, so that each
	// drop is logged once per process rather than once per execution
	// (default: one per Service, writing to Logger).
	Drops *catalog.DropLog
	// Suspensions keeps suspended executions; without it a request for
	// approval "suspend" is refused.
	Suspensions suspend.Store
	// Policy says who may decide: who may set allow_destructive, and who
	// may approve or reject a suspended execution's calls. The zero Policy
	// lets only the client's user decide, through elicitation.
	Policy approval.Policy
	// Notify, when set, is told of every suspension (the deployment sends
	// an event approvers watch). It must not block for long: it runs
	// before the answer leaves.
	Notify func(context.Context, execution.SuspensionNotice)
	// Learner, when set, gives the trace record of each root execution
	// that succeeds and calls tools its pattern (internal/learn), read
	// from the tree the static analysis parsed; nil learns nothing.
	Learner *learn.Learner
	// Ranker ranks tools.search and annotates tools.describe with the
	// capabilities' evidence; nil ranks lexically.
	Ranker *ranking.Ranker
	// Sessions keeps sessions; without it a request for one is refused.
	Sessions suspend.Sessions
	// SessionTTL is a new session's idle time unless the request sets one
	// (default execution.DefaultSessionTTL, at most
	// execution.MaxSessionTTL).
	SessionTTL time.Duration
	// SessionMaxBytes bounds a session's saved state (default
	// DefaultSessionMaxBytes): an execution whose state would outgrow it
	// fails LIMIT_EXCEEDED session_size, and the session keeps the state
	// before it.
	SessionMaxBytes int
	// Journal keeps the journal of effects (internal/journal): every
	// call of a tool that is not read-only is journalled there before it
	// is sent, and its outcome after. Without it each run keeps its own in
	// memory: its document still lists its effects, and nothing of them
	// outlives the process.
	Journal journal.Store
	// MaxGrant is the most calls one grant may cover (default
	// execution.DefaultMaxGrant): a person approving a call site for N
	// calls chooses N up to it.
	MaxGrant int
	// Traces, when set, reads stored executions: a rollback tells a known
	// execution that made no effect from an unknown id by them, and one
	// that has ended from one still running.
	Traces TraceReader
	// Answerer, when set, answers a remote server's question in line in
	// an execution that cannot suspend, where Policy lets the caller
	// answer (question.go): the front end's caller is the person at the
	// keyboard (pml run). Without it such a question fails the call.
	Answerer elicit.Answerer
	// Counter counts the calls (and sums) the policy set's limits bound
	// (internal/policy/usage); without it a call a limit applies to is
	// refused.
	Counter policy.Counter
}

// Service runs executions. It is safe for concurrent use.
type Service struct {
	engine  *guest.Engine
	sources []execution.ToolSource
	sink    trace.Sink
	log     *slog.Logger
	maxTime time.Duration
	limits  guest.Limits
	sandbox int
	drops   *catalog.DropLog
	store   suspend.Store
	policy  approval.Policy
	notify  func(context.Context, execution.SuspensionNotice)
	owners  map[string]owner // the ServerSources' servers, fixed at New
	// listFirst: the sources are in the order the cached listing
	// serves; listing is the last one built (see listing).
	listFirst bool
	listing   atomic.Pointer[listing]
	learner   *learn.Learner
	ranker    *ranking.Ranker
	asker     elicit.Answerer

	// gate decides every tool call by the policy set (gate.go).
	gate *policy.Gate

	sessions   suspend.Sessions
	sessionTTL time.Duration
	sessionMax int
	journal    journal.Store
	maxGrant   int
	traces     TraceReader
}

// New returns a Service running code on engine.
func New(engine *guest.Engine, opts Options) *Service {
	s := &Service{engine: engine, sources: opts.Sources, sink: opts.Sink, log: opts.Logger, maxTime: opts.MaxTimeout, limits: opts.Limits, sandbox: opts.Sandboxes, drops: opts.Drops, store: opts.Suspensions,
		policy: opts.Policy, notify: opts.Notify, learner: opts.Learner, ranker: opts.Ranker, asker: opts.Answerer,
		sessions: opts.Sessions, sessionTTL: opts.SessionTTL, sessionMax: opts.SessionMaxBytes, journal: opts.Journal, maxGrant: opts.MaxGrant,
		traces: opts.Traces}
	if s.maxGrant <= 0 {
		s.maxGrant = execution.DefaultMaxGrant
	}
	if compiled, err := s.policy.Compile(); err == nil {
		// Compiled once: a Policy built without its rules would generate
		// the default set for every decision.
		s.policy = compiled
	}
	s.gate = &policy.Gate{Rules: s.policy.Authorizer(), Counter: opts.Counter}
	if s.sessionTTL <= 0 {
		s.sessionTTL = execution.DefaultSessionTTL
	}
	s.sessionTTL = min(s.sessionTTL, execution.MaxSessionTTL)
	if s.sessionMax <= 0 {
		s.sessionMax = DefaultSessionMaxBytes
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.drops == nil {
		s.drops = catalog.NewDropLog(s.log)
	}
	if s.maxTime <= 0 {
		s.maxTime = 60 * time.Second
	}
	if s.sandbox <= 0 {
		s.sandbox = execution.DefaultSandboxes
	}
	s.owners = ownersOf(s.sources)
	s.listFirst = listingFirst(s.sources)
	return s
}

// entry is one tool of an execution with the source that serves it.
type entry struct {
	tool   catalog.Tool
	source execution.ToolSource
}

// Catalog returns every tool the service offers, deduplicated by priority.
// A source that fails is logged and skipped: one dead server never hides
// the others.
func (s *Service) Catalog(ctx context.Context) []catalog.Tool {
	entries := s.catalog(ctx)
	out := make([]catalog.Tool, len(entries))
	for i, e := range entries {
		out[i] = e.tool
	}
	return out
}

func (s *Service) catalog(ctx context.Context) []entry {
	b := s.newBuilder()
	for i, src := range s.sources {
		tools, err := src.Tools(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "tool source unavailable", "err", err)
		}
		b.add(ctx, i, src, tools)
	}
	return b.sorted()
}

// builder merges sources' tools by the catalog's rules: the first source
// to offer a name wins it, a configured MCP server's name is its own, and
// names must be valid.
type builder struct {
	s      *Service
	owners map[string]owner
	seen   map[string]bool
	out    []entry
}

func (s *Service) newBuilder() *builder {
	return &builder{s: s, owners: s.serverOwners(), seen: map[string]bool{}}
}

func (b *builder) add(ctx context.Context, i int, src execution.ToolSource, tools []catalog.Tool) {
	for _, t := range tools {
		// Checked on every build, not only when a capability is saved:
		// one saved before the server was configured, or through a store
		// the save check does not guard, must not take the server's calls
		// either.
		if o, ok := b.owners[t.Server]; ok && o.index != i {
			b.s.drops.Drop(ctx, t.Server, t.Name, "its server name belongs to a configured MCP server", "kind", string(t.Kind))
			continue
		}
		if b.seen[t.FullName()] {
			b.s.drops.Drop(ctx, t.Server, t.Name, "an earlier source offers the same name", "kind", string(t.Kind))
			continue
		}
		if err := errors.Join(catalog.ValidName(t.Server), catalog.ValidName(t.Name)); err != nil {
			b.s.drops.Drop(ctx, t.Server, t.Name, err.Error(), "kind", string(t.Kind))
			continue
		}
		b.seen[t.FullName()] = true
		b.out = append(b.out, entry{tool: t, source: src})
	}
}

func (b *builder) sorted() []entry {
	slices.SortFunc(b.out, func(a, b entry) int { return strings.Compare(a.tool.FullName(), b.tool.FullName()) })
	return b.out
}

// resolve is the catalog an execution needs: every tool of the sources
// that list (MCP servers, demo tools: lists they keep in memory), and of
// the sources that resolve (capabilities), only names — those the code
// references — that no earlier source has and no configured server owns.
// failed holds the names a resolving source could not answer for.
func (s *Service) resolve(ctx context.Context, names []string) (entries []entry, failed map[string]error, plain *listing) {
	if !s.listFirst {
		return s.resolveEach(ctx, names)
	}
	l := s.listed(ctx)
	b := &l.merged // read only, until a resolving source adds a tool
	for i := len(l.keys); i < len(s.sources); i++ {
		ask := s.toAsk(b, i, names)
		if len(ask) == 0 {
			continue
		}
		tools, err := s.sources[i].(execution.ResolvingSource).Resolve(ctx, ask)
		if err != nil {
			failed = s.resolveFailed(ctx, failed, ask, err)
		}
		if len(tools) > 0 && b == &l.merged {
			b = l.clone()
		}
		b.add(ctx, i, s.sources[i], tools)
	}
	if b == &l.merged {
		return l.sorted, failed, l
	}
	return b.sorted(), failed, nil
}

// resolveEach is resolve without the cached listing, for sources in an
// order it does not serve (listingFirst).
func (s *Service) resolveEach(ctx context.Context, names []string) (entries []entry, failed map[string]error, plain *listing) {
	b := s.newBuilder()
	for i, src := range s.sources {
		rs, ok := src.(execution.ResolvingSource)
		if !ok {
			tools, err := src.Tools(ctx)
			if err != nil {
				s.log.WarnContext(ctx, "tool source unavailable", "err", err)
			}
			b.add(ctx, i, src, tools)
			continue
		}
		ask := s.toAsk(b, i, names)
		if len(ask) == 0 {
			continue
		}
		tools, err := rs.Resolve(ctx, ask)
		if err != nil {
			failed = s.resolveFailed(ctx, failed, ask, err)
		}
		b.add(ctx, i, src, tools)
	}
	return b.sorted(), failed, nil
}

// toAsk are the names the resolving source at index i is asked for: those
// no earlier source took and no other source's configured server owns.
func (s *Service) toAsk(b *builder, i int, names []string) []string {
	var ask []string
	for _, n := range names {
		server, tool, _ := strings.Cut(n, ":")
		if o, owned := b.owners[server]; b.seen[n] || (owned && o.index != i) || catalog.ValidName(server) != nil || catalog.ValidName(tool) != nil {
			continue
		}
		ask = append(ask, n)
	}
	return ask
}

// resolveFailed records that ask could not be resolved.
func (s *Service) resolveFailed(ctx context.Context, failed map[string]error, ask []string, err error) map[string]error {
	s.log.WarnContext(ctx, "tool source unavailable", "err", err)
	if failed == nil {
		failed = map[string]error{}
	}
	for _, n := range ask {
		failed[n] = err
	}
	return failed
}

// owner is the ServerSource that owns a server name, and its position in
// Service.sources.
type owner struct {
	index  int
	source execution.ServerSource
}

// serverOwners maps each server name a ServerSource owns to it; the first
// source to claim a name keeps it.
func (s *Service) serverOwners() map[string]owner { return s.owners }

// ownersOf builds serverOwners' map, once: a ServerSource's servers are
// fixed for its life.
func ownersOf(sources []execution.ToolSource) map[string]owner {
	out := map[string]owner{}
	for i, src := range sources {
		ss, ok := src.(execution.ServerSource)
		if !ok {
			continue
		}
		for _, name := range ss.Servers() {
			if _, taken := out[name]; !taken {
				out[name] = owner{index: i, source: ss}
			}
		}
	}
	return out
}

// downServer returns the retryable UNAVAILABLE error of a reference to a
// configured server that cannot serve now, nil otherwise: while a server
// is down (or was never reached), a name it does not list may still be
// one of its tools.
func downServer(owners map[string]owner, r analysis.Ref, filter catalog.Filter) *fault.Error {
	o, ok := owners[r.Server]
	if !ok || !filter.Allows(r.Server, r.Tool) {
		// Not a server's, or narrowed away by the request: missing.
		return nil
	}
	err := o.source.CheckServer(r.Server)
	if err == nil {
		return nil
	}
	fe := *fault.As(err)
	fe.Tool = r.FullName()
	fe.Message = "mcp." + r.Server + "." + r.Tool + " (line " + strconv.Itoa(r.Line) + "): " + fe.Message
	return &fe
}

// Execute runs one request. It always returns a Response; failures are in
// Response.Error. An execution that suspends (Request.Approval) is saved
// and answered with Status StatusSuspended and its pending calls.
//
// A request that no front end validated (see execution.Request.Validate)
// is validated here; one that was is not parsed again.
func (s *Service) Execute(ctx context.Context, req execution.Request) *execution.Response {
	start := time.Now()
	if req.ExecutionID == "" {
		req.ExecutionID = trace.NewExecutionID()
	}
	ctx = s.startSpan(ctx, &req, start)
	var out runOut
	resp, res, shape := s.execute(ctx, &req, start, &out)
	sess := out.sess
	waits := res != nil && res.Suspended != nil
	if sess != nil && !waits {
		s.closeSession(ctx, sess, resp, res)
	}
	ex := s.execRecord(ctx, &req, resp, res, start)
	if sess != nil {
		ex.SessionID, ex.SessionStep = sess.claim.ID, sess.data.Steps
	}
	if waits {
		s.suspended(ctx, &req, resp, res.Suspended, &ex, start, out)
	}
	if shape != nil && resp.OK && !resp.Suspended() {
		// A pattern for the learning loop; it travels in the trace record.
		ex.Pattern = s.learner.Pattern(req.Principal, shape, ownCallsView(resp))
	}
	s.record(ctx, ex, resp)
	resp.ApplyCallDetail(req.CallDetail)
	return resp
}

// toolSet is what an execution may call: the tools of the sources that
// list and the capabilities its code names (see resolve), narrowed by the
// request and everything above it. Names the code reaches dynamically are
// resolved as it reaches them (toolHost.Resolve).
type toolSet struct {
	all       []catalog.Tool
	visible   []catalog.Tool
	forbidden map[string]bool
	entries   map[string]entry
	// failed are the names whose source could not be read.
	failed map[string]error
	// guest is what the guest is given, when built with the set (a
	// listing's shared set); nil: built per execution.
	guest []guest.Tool
}

// toolSet narrows the tools names need to what req may call: its own
// filter, and what the runs above it narrowed to.
func (s *Service) toolSet(ctx context.Context, req *execution.Request, names []string) (*toolSet, *fault.Error) {
	all, failed, l := s.resolve(ctx, names)
	filter := req.Filter()
	if l != nil && filter.IsZero() && len(req.Inherited()) == 0 {
		// Nothing narrowed, nothing resolved: the listing's own set.
		if failed == nil {
			return l.plain, nil
		}
		ts := *l.plain
		ts.failed = failed
		return &ts, nil
	}
	tools := make([]catalog.Tool, len(all))
	for i, e := range all {
		tools[i] = e.tool
	}
	visible, err := filter.Narrow(tools)
	if err != nil {
		// A pattern that selects none of these may select a capability
		// the code does not name: judged against the whole catalog (the
		// sources' indexes), as a filter always was.
		if _, err := filter.Narrow(s.Catalog(ctx)); err != nil {
			return nil, fault.As(err)
		}
		visible = slices.DeleteFunc(slices.Clone(tools), func(t catalog.Tool) bool { return !filter.Allows(t.Server, t.Name) })
	}
	visible, forbidden := applyInherited(visible, tools, req.Inherited())
	byName := make(map[string]entry, len(visible))
	for _, e := range all {
		byName[e.tool.FullName()] = e
	}
	entries := make(map[string]entry, len(visible))
	for _, t := range visible {
		entries[t.FullName()] = byName[t.FullName()]
	}
	return &toolSet{all: tools, visible: visible, forbidden: forbidden, entries: entries, failed: failed}, nil
}

// refNames are the full names refs names.
func refNames(refs analysis.Refs) []string {
	out := make([]string, len(refs.Tools))
	for i, r := range refs.Tools {
		out[i] = r.FullName()
	}
	return out
}

// execute runs req; shape is its code's shape when the run is one the
// learning loop reads (a root execution, learning on, code that names a
// tool or reaches them dynamically). A session's run, and the plan of a
// run that may wait for a person, are left in out for the caller.
func (s *Service) execute(ctx context.Context, req *execution.Request, start time.Time, out *runOut) (resp *execution.Response, res *guest.Result, shape *learn.Shape) {
	fail := func(err *fault.Error) (*execution.Response, *guest.Result, *learn.Shape) {
		resp := execution.Failed(req.ExecutionID, err)
		resp.DurationMS = ms(time.Since(start))
		return resp, nil, nil
	}
	if !req.Validated() {
		if ferr := req.Validate(); ferr != nil {
			return fail(ferr)
		}
	}
	if req.Async {
		// internal/runs takes asynchronous requests; the service alone
		// runs each while its caller waits.
		return fail(fault.New(fault.InvalidRequest, "async is not available here: this service keeps no runs of asynchronous executions"))
	}
	if req.Checkpoint != nil {
		// A runner took the execution over: it goes on from its last
		// checkpoint, not from its code.
		resp, res := s.continueRun(ctx, req, start)
		return resp, res, nil
	}
	// A capability run never parks (its calls are refused instead), so
	// only a root execution needs somewhere to suspend to.
	if req.Approval == execution.ApprovalSuspend && req.Parent == nil && s.store == nil {
		return fail(fault.New(fault.InvalidRequest, `approval "suspend" is not available here: this service keeps no suspended executions`))
	}
	if ferr := req.CheckQueued(s.notify != nil); ferr != nil {
		return fail(ferr)
	}
	// Consent is the deployment's to give: a capability run inherits its
	// root's, which was checked here.
	if req.AllowDestructive && req.Parent == nil && !s.policy.MayConsent(req.Principal) {
		return fail(&fault.Error{Code: fault.Forbidden, Details: map[string]any{"reason": "policy"},
			Message: "allow_destructive is not honoured for this caller: under this deployment's policy " + s.policy.Consenters() +
				` may run calls that need approval without asking. Send approval "suspend" instead: such a call then waits for ` +
				s.policy.Deciders() + " to decide"})
	}

	timeout := s.maxTime
	if req.TimeoutMS > 0 {
		timeout = min(timeout, time.Duration(req.TimeoutMS)*time.Millisecond)
	}
	if req.InSession() {
		// Claimed before anything else is looked at: the session imposes
		// its narrowing, and a refusal means nothing ran.
		run, ferr := s.openSession(ctx, req, timeout+suspend.LeaseMargin)
		if ferr != nil {
			resp, res, _ := fail(ferr)
			resp.Refused = true
			return resp, res, nil
		}
		out.sess = run
	}

	// The tool set is built from the names the code references (MCP
	// tools are listed whole, capabilities resolved by name), so the
	// static analysis comes first; a bad tools filter is still reported
	// before a script that does not parse.
	learning := s.learner != nil && req.Parent == nil
	prep, perr := script.PrepareWithLimits(req.Code, req.Lang, script.Limits{CodeBytes: s.limits.CodeBytes, KeepParse: learning})
	var refs analysis.Refs
	if perr == nil {
		refs = prep.Refs
	}
	ts, ferr := s.toolSet(ctx, req, refNames(refs))
	if ferr != nil {
		return fail(ferr)
	}
	if perr != nil {
		return fail(fault.As(perr))
	}

	// Every mcp.x.y the code names must resolve before a sandbox starts
	// (when the parser reads the code: else each is checked as it is called).
	if ferr := forbiddenRef(refs, ts.forbidden, req.Inherited()); ferr != nil {
		return fail(ferr)
	}
	if ferr := s.unresolved(ctx, req, refs, ts); ferr != nil {
		return fail(ferr)
	}
	if ferr := s.checkPins(ctx, req); ferr != nil {
		return fail(ferr)
	}
	if parsed := prep.Parsed(); parsed != nil && (len(refs.Tools) > 0 || refs.Dynamic) {
		// Read now, while the parser's tree is in the cache (after the
		// run it costs about three times as much), from the tree the
		// analysis parsed: no second parse. Code that names no tool
		// cannot make a pattern.
		shape = learn.Read(parsed, s.learner.Known())
	}

	gtools := ts.guest // shared: the guest copies it before adding to it
	if gtools == nil {
		gtools = make([]guest.Tool, 0, len(ts.visible)+len(ts.forbidden))
		for _, t := range ts.visible {
			gtools = append(gtools, guestTool(t))
		}
		gtools = append(gtools, forbiddenGuestTools(ts.all, ts.forbidden)...)
	}
	limits := s.limits
	limits.Timeout = timeout
	host := &toolHost{service: s, req: req, entries: ts.entries, visible: ts.visible, forbidden: ts.forbidden,
		budget: s.budget(req.Parent), effects: s.newEffectLog(req, true)}
	greq := guest.Request{
		ExecutionID:  req.ExecutionID,
		Code:         prep.Code,
		Args:         req.Args,
		Tools:        gtools,
		Host:         host,
		Limits:       limits,
		ArgsDeclared: prep.Top.ArgsDeclared,
	}
	if run := out.sess; run != nil {
		host.session = run.claim.ID
		run.kept, run.checked = prep.Persist(), prep.Checked
		greq.Code, greq.Session, greq.From = prep.Code, true, run.claim.Sandbox
	}
	if mayPark(req) {
		// After Persist: the sites are keyed in the code that runs.
		out.plan = newPlan(prep.CallSites(), ts.entries)
		host.gate = newGate(out.plan)
	}
	s.hook(ctx, &greq, req, host)
	s.checkpoint(&greq, req, host, runState{StartedAt: start.UTC()})
	res = s.engine.Run(ctx, greq)
	prep.MapError(res.Err)
	return s.response(ctx, res, req, host, start), res, shape
}

// runOut is what a first run leaves for Execute besides its answer: the
// session it holds, and the plan of a run that may wait for a person.
type runOut struct {
	sess *sessionRun
	plan *planState
}

// mayPark reports whether req's calls that need a person wait for one: a
// root execution asking to suspend, without consent given up front.
func mayPark(req *execution.Request) bool {
	return req.Approval == execution.ApprovalSuspend && req.Parent == nil && !req.AllowDestructive
}

// checkPins asks the sources that version their tools whether a root
// request's pins exist, before any sandbox starts: a pin to a missing
// version fails the request rather than a call in the middle of its run.
// A capability run's pins were checked where they were set (the root's
// here, a capability's own when it was saved).
func (s *Service) checkPins(ctx context.Context, req *execution.Request) *fault.Error {
	if req.Parent != nil || len(req.Capabilities) == 0 {
		return nil
	}
	for _, src := range s.sources {
		if pc, ok := src.(execution.PinChecker); ok {
			if err := pc.CheckPins(ctx, req.Capabilities); err != nil {
				return fault.As(err)
			}
			return nil
		}
	}
	return fault.New(fault.InvalidRequest, "capabilities pins versions, and this service has no capability registry")
}

// hook connects the engine's callbacks to the request's: the park
// decision, and the calls and console lines the trace sink and OnEvent
// receive as they happen.
func (s *Service) hook(ctx context.Context, greq *guest.Request, req *execution.Request, host *toolHost) {
	entries := host.entries
	if host.gate != nil {
		greq.Park = func(c guest.Call) guest.Gate { return host.park(ctx, c) }
	}
	rec, _ := s.sink.(trace.CallRecorder)
	if rec != nil || req.OnEvent != nil {
		// Calls go to the sink as they end, complete, so that by the time
		// the script returns most of its trace is already written.
		greq.OnCall = func(c trace.Call) {
			c = finishCall(c, entries, req, host)
			if rec != nil {
				rec.RecordCall(ctx, c)
			}
			if req.OnEvent != nil {
				req.OnEvent(execution.Event{Type: execution.EventCallEnd, Call: c})
			}
		}
	}
	if req.OnEvent != nil {
		greq.OnLog = func(e trace.LogEntry) { req.OnEvent(execution.Event{Type: execution.EventLog, Log: e}) }
		greq.OnCallStart = func(c trace.Call) {
			req.OnEvent(execution.Event{Type: execution.EventCallStart, Call: finishCall(c, entries, req, host)})
		}
	}
}

// response is the Response of a run (or a resumed run) that got as far
// as the engine.
func (s *Service) response(ctx context.Context, res *guest.Result, req *execution.Request, host *toolHost, start time.Time) *execution.Response {
	for i := range res.Calls {
		res.Calls[i] = finishCall(res.Calls[i], host.entries, req, host)
	}
	// Descendants' calls follow the execution's own, each with its
	// execution id and the parent call that started its run.
	res.Calls = append(res.Calls, host.descendantCalls()...)
	resp := &execution.Response{
		OK:            res.OK,
		Result:        res.Value,
		Logs:          res.Logs,
		LogsTruncated: res.LogsTruncated,
		Error:         res.Err,
		Calls:         res.Calls,
		DurationMS:    ms(time.Since(start)),
		ExecutionID:   res.ExecutionID,
		Sandboxes:     host.budget.Used(),
	}
	if resp.Calls == nil {
		resp.Calls = []trace.Call{}
	}
	resp.Effects = host.effects.effects(ctx, res.Suspended == nil)
	return resp
}

// finishCall completes a call record with what only the executor knows: the
// kind of tool, the parent call of a capability run, the child execution a
// capability call started.
func finishCall(c trace.Call, entries map[string]entry, req *execution.Request, host *toolHost) trace.Call {
	if e, ok := entries[c.Server+":"+c.Tool]; ok {
		c.Kind = e.tool.Kind
	} else if e, ok := host.lookup(c.Server + ":" + c.Tool); ok {
		c.Kind = e.tool.Kind // resolved as the script reached it
	}
	if req.Parent != nil {
		c.ParentCallID = req.Parent.CallID
	}
	c.Policies = host.policiesOf(c.CallID)
	ch := host.childOf(c.CallID)
	c.ChildExecutionID, c.Version = ch.executionID, ch.version
	return c
}

// unresolved reports the first mcp.x.y the code names that the tool set
// lacks: a retryable UNAVAILABLE when it names a configured server that is
// down or its source could not be read, else TOOL_NOT_FOUND with the
// nearest names of everything the execution could call (the whole
// catalog, narrowed as the execution is: only this error path reads it).
func (s *Service) unresolved(ctx context.Context, req *execution.Request, refs analysis.Refs, ts *toolSet) *fault.Error {
	owners := s.serverOwners()
	for _, r := range refs.Tools {
		if _, ok := ts.entries[r.FullName()]; ok {
			continue
		}
		if ferr := downServer(owners, r, req.Filter()); ferr != nil {
			return ferr
		}
		if err, ok := ts.failed[r.FullName()]; ok {
			fe := fault.Wrap(fault.Unavailable, err, "mcp."+r.Server+"."+r.Tool+" (line "+strconv.Itoa(r.Line)+") could not be resolved")
			fe.Retryable, fe.Tool = true, r.FullName()
			return fe
		}
		names := s.visibleNames(ctx, req, ts)
		near := catalog.Suggest(r.FullName(), names, 3)
		msg := "mcp." + r.Server + "." + r.Tool + " (line " + strconv.Itoa(r.Line) + ") is neither a tool nor a capability of this execution"
		if len(near) > 0 {
			js := make([]string, len(near))
			for i, n := range near {
				js[i] = "mcp." + strings.Replace(n, ":", ".", 1)
			}
			msg += "; did you mean " + strings.Join(js, ", ") + "?"
		}
		return &fault.Error{Code: fault.ToolNotFound, Message: msg, Tool: r.FullName(), Details: map[string]any{"suggestions": near, "line": r.Line, "column": r.Column}}
	}
	return nil
}

// discoverable is every tool of the catalog req may call (its filter and
// every inherited narrowing), with those of known, sorted by full name.
func (s *Service) discoverable(ctx context.Context, req *execution.Request, known ...[]catalog.Tool) []catalog.Tool {
	filter, inherited := req.Filter(), req.Inherited()
	var out []catalog.Tool
	seen := map[string]bool{}
	keep := func(t catalog.Tool) {
		if !seen[t.FullName()] && filter.Allows(t.Server, t.Name) && inherited.Allows(t.Server, t.Name) {
			seen[t.FullName()] = true
			out = append(out, t)
		}
	}
	for _, ts := range known {
		for _, t := range ts {
			keep(t)
		}
	}
	for _, e := range s.catalog(ctx) {
		keep(e.tool)
	}
	slices.SortFunc(out, func(a, b catalog.Tool) int { return strings.Compare(a.FullName(), b.FullName()) })
	return out
}

// visibleNames are the full names of discoverable(ts.visible), sorted.
func (s *Service) visibleNames(ctx context.Context, req *execution.Request, ts *toolSet) []string {
	tools := s.discoverable(ctx, req, ts.visible)
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.FullName()
	}
	return names
}

// execRecord is the trace record of an execution's first run (res is
// nil when it never reached the engine).
func (s *Service) execRecord(ctx context.Context, req *execution.Request, resp *execution.Response, res *guest.Result, start time.Time) trace.Execution {
	sum := sha256.Sum256([]byte(req.Code))
	ex := trace.Execution{
		ID:          resp.ExecutionID,
		CodeHash:    hex.EncodeToString(sum[:]),
		CodeBytes:   len(req.Code),
		StartedAt:   start,
		DurationMS:  resp.DurationMS,
		Source:      string(req.Source),
		Principal:   req.Principal,
		TraceID:     tracectx.TraceID(ctx, req.TraceHeader),
		TraceHeader: req.TraceHeader,
	}
	if res != nil {
		ex.CPUMS = ms(res.CPUTime)
	}
	if p := req.Parent; p != nil {
		ex.ParentExecutionID = p.ExecutionID
		ex.ParentCallID = p.CallID
		ex.Capability = p.Capability
		ex.CapabilityVersion, ex.Provenance = p.Version, p.Provenance
		ex.Depth = p.Depth()
	}
	ex.Pins = req.Pins()
	ex.RollbackOf = req.RollbackOf
	return ex
}

// startSpan opens the execution's span when the sink traces live
// (trace.Spans), and returns the context its run and calls go on under.
func (s *Service) startSpan(ctx context.Context, req *execution.Request, start time.Time) context.Context {
	sp, ok := s.sink.(trace.Spans)
	if !ok {
		return ctx
	}
	ex := trace.Execution{ID: req.ExecutionID, StartedAt: start, Source: string(req.Source), TraceHeader: req.TraceHeader}
	if p := req.Parent; p != nil {
		ex.ParentExecutionID, ex.ParentCallID, ex.Capability, ex.Depth = p.ExecutionID, p.CallID, p.Capability, p.Depth()
	}
	return sp.StartExecution(ctx, ex)
}

// ownCalls are resp's calls of its own execution: descendants' calls in
// the response belong to their own executions, which record themselves.
func ownCalls(resp *execution.Response) []trace.Call {
	own := make([]trace.Call, 0, len(resp.Calls))
	for _, c := range resp.Calls {
		if c.ExecutionID == resp.ExecutionID {
			own = append(own, c)
		}
	}
	return own
}

// ownCallsView is ownCalls for a reader that keeps nothing: resp's own
// slice when every call in it is its own (a run with no capability calls),
// so a script's hundred calls are not copied to be read once.
func ownCallsView(resp *execution.Response) []trace.Call {
	for _, c := range resp.Calls {
		if c.ExecutionID != resp.ExecutionID {
			return ownCalls(resp)
		}
	}
	return resp.Calls
}

// record sends the execution to the sink, with the status and call count
// resp gives it. It never fails the execution.
func (s *Service) record(ctx context.Context, ex trace.Execution, resp *execution.Response) {
	if s.sink == nil {
		return
	}
	own := ownCalls(resp)
	ex.Calls = len(own)
	switch {
	case resp.Suspended():
		ex.Status = trace.StatusSuspended
	case resp.OK:
		ex.Status = trace.StatusOK
	default:
		ex.Status = trace.StatusError
		if resp.Error != nil {
			ex.ErrorCode, ex.Limit = resp.Error.Code, resp.Error.Limit
		}
	}
	s.sink.Record(ctx, ex, own)
}

// Flush writes buffered trace records and what the sources batch
// (execution.Flusher: capability call counts); call it before a Lambda
// returns.
func (s *Service) Flush(ctx context.Context) error {
	var errs []error
	for _, src := range s.sources {
		if f, ok := src.(execution.Flusher); ok {
			errs = append(errs, f.Flush(ctx))
		}
	}
	if s.sink != nil {
		errs = append(errs, s.sink.Flush(ctx))
	}
	return errors.Join(errs...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
