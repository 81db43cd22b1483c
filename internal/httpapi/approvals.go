package httpapi

import (
	"context"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// The approval page's link in answers. Every document of a suspended
// execution this API answers — execute, resume, GET /executions/{id},
// tasks/get, execute_code's text — names the execution's page
// (approval_url), where a person signs in and decides: the caller is told
// where to send its person, never how to decide for them.

// baseKey carries the base URL a request reached the server by.
type baseKey struct{}

// requestBase is the base URL the request in ctx reached the server by
// ("" outside a request).
func requestBase(ctx context.Context) string {
	b, _ := ctx.Value(baseKey{}).(string)
	return b
}

// approvalURL is execution id's page, "" without a page.
func (a *api) approvalURL(ctx context.Context, id string) string {
	if a.Approvals == nil || id == "" {
		return ""
	}
	base := requestBase(ctx)
	if base == "" && !a.Approvals.Configured() {
		return ""
	}
	return a.Approvals.ExecutionURL(base, id)
}

// pageLinks is the API's executor: the service's, with every suspended
// document it answers naming its page.
type pageLinks struct {
	execution.Executor
	a *api
}

func (p pageLinks) link(ctx context.Context, resp *execution.Response) *execution.Response {
	if resp != nil && resp.Suspended() {
		resp.ApprovalURL = p.a.approvalURL(ctx, resp.ExecutionID)
	}
	return resp
}

func (p pageLinks) Execute(ctx context.Context, req execution.Request) *execution.Response {
	return p.link(ctx, p.Executor.Execute(ctx, req))
}

func (p pageLinks) Resume(ctx context.Context, rr execution.ResumeRequest) (*execution.Response, *fault.Error) {
	resp, ferr := p.Executor.Resume(ctx, rr)
	return p.link(ctx, resp), ferr
}

func (p pageLinks) Waiting(ctx context.Context, id string) (*execution.Response, *fault.Error) {
	resp, ferr := p.Executor.Waiting(ctx, id)
	return p.link(ctx, resp), ferr
}

func (p pageLinks) Status(ctx context.Context, id, principal string) (*execution.Response, *fault.Error) {
	resp, ferr := p.Executor.Status(ctx, id, principal)
	return p.link(ctx, resp), ferr
}

// pageBase is the middleware's part: the request's base URL, for links.
func pageBase(ctx context.Context, base string) context.Context {
	return context.WithValue(ctx, baseKey{}, base)
}
