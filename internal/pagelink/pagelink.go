// Package pagelink names the approval page in the answers PML Sandbox's
// front ends give. Every document of a suspended execution the REST API or
// the MCP server answers — execute, resume, GET /executions/{id},
// tasks/get, execute_code's text — names the execution's page
// (approval_url), where a person signs in and decides: the caller is told
// where to send its person, never how to decide for them.
package pagelink

import (
	"context"
	"net/http"

	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// baseKey carries the base URL a request reached the server by.
type baseKey struct{}

// WithBase keeps, in ctx (r's), the base URL r reached the server by: a
// page without a base URL of its own is linked by it, so that the link
// works from where the caller stands (a stage path, a forwarded host).
func WithBase(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, baseKey{}, approvalpage.RequestBase(r))
}

// URL is execution id's page, "" without a page, or when neither the page
// nor the request (WithBase) says where it is served.
func URL(ctx context.Context, page *approvalpage.Page, id string) string {
	if page == nil || id == "" {
		return ""
	}
	base, _ := ctx.Value(baseKey{}).(string)
	if base == "" && !page.Configured() {
		return ""
	}
	return page.ExecutionURL(base, id)
}

// Executor is exec with every suspended document it answers naming its
// page; exec itself where there is no page.
func Executor(exec execution.Executor, page *approvalpage.Page) execution.Executor {
	if page == nil {
		return exec
	}
	return links{Executor: exec, page: page}
}

// links is Executor's wrapper.
type links struct {
	execution.Executor
	page *approvalpage.Page
}

func (l links) link(ctx context.Context, resp *execution.Response) *execution.Response {
	if resp != nil && resp.Suspended() {
		resp.ApprovalURL = URL(ctx, l.page, resp.ExecutionID)
	}
	return resp
}

func (l links) Execute(ctx context.Context, req execution.Request) *execution.Response {
	return l.link(ctx, l.Executor.Execute(ctx, req))
}

func (l links) Resume(ctx context.Context, rr execution.ResumeRequest) (*execution.Response, *fault.Error) {
	resp, ferr := l.Executor.Resume(ctx, rr)
	return l.link(ctx, resp), ferr
}

func (l links) Waiting(ctx context.Context, id string) (*execution.Response, *fault.Error) {
	resp, ferr := l.Executor.Waiting(ctx, id)
	return l.link(ctx, resp), ferr
}

func (l links) Status(ctx context.Context, id, principal string) (*execution.Response, *fault.Error) {
	resp, ferr := l.Executor.Status(ctx, id, principal)
	return l.link(ctx, resp), ferr
}

func (l links) Rollback(ctx context.Context, rr execution.RollbackRequest) (*execution.Rollback, *fault.Error) {
	rb, ferr := l.Executor.Rollback(ctx, rr)
	if rb != nil {
		l.link(ctx, rb.Execution)
	}
	return rb, ferr
}
