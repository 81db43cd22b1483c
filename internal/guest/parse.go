package guest

import (
	"context"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Parse reports QuickJS's verdict on code as a script body without running
// any of it: nil when the engine compiles it, wrapped as Run wraps it, as
// that one async function's body. Otherwise the error Run would report
// before the script's first statement: a ScriptError "SyntaxError: …"
// (also for code that closes the function body and goes on at top level,
// which the host refuses), or the limit the parse crossed (its stack
// bounds how deep the parser recurses, its memory what it allocates, its
// timeout how long it takes). limits are a request's, capped as for Run.
//
// It is how the host's own checks of a script (internal/js/prescan,
// internal/js/script) are held to never refusing what the engine reads.
func (e *Engine) Parse(ctx context.Context, code string, limits Limits) *fault.Error {
	if !e.enter() {
		return shutDown()
	}
	defer e.running.Done()
	limits = limits.withDefaults(e.defaults).capped(e.max)
	if len(code) > limits.CodeBytes {
		return fault.Limitf(fault.LimitCodeSize, "code is %d bytes; the limit is %d", len(code), limits.CodeBytes)
	}
	in, err := e.instance(ctx)
	if err != nil {
		return fault.Wrap(fault.SandboxError, err, "preparing a sandbox")
	}
	in.mem.bind(ctx)
	res := &Result{}
	x := newExecution(ctx, e, Request{Code: code, Limits: limits}, limits, res, time.Now())
	defer func() { e.release(in, x.reusable(res)) }()
	defer x.shutdown()
	in.runs++
	if in.fn(exParse) == nil {
		return fault.New(fault.SandboxError, "this guest build cannot parse without running (no pml_parse)")
	}
	doc, ferr := x.parse(in)
	if ferr != nil {
		res.Err = ferr
		return ferr
	}
	res.Err = doc.Error
	return doc.Error
}

// parse calls pml_parse and decodes its answer.
func (x *execution) parse(in *instance) (*outputDoc, *fault.Error) {
	ctx := context.WithValue(x.ctx, execKey{}, x)
	codePtr, ferr := x.put(ctx, in, []byte(x.req.Code), "loading the code")
	if ferr != nil {
		return nil, ferr
	}
	ret, err := in.fn(exParse).Call(ctx, uint64(codePtr), uint64(len(x.req.Code)), uint64(x.limits.MemoryBytes), uint64(x.limits.StackBytes))
	if err != nil {
		return nil, x.trapError(err)
	}
	// pml_parse never waits: drive only decodes its document.
	return x.drive(ctx, in, int64(ret[0]))
}
