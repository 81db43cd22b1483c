package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
)

// MCP tasks (protocol 2025-11-25). execute_code declares task support;
// a client that sends it with params.task gets a task at once — the
// execution runs asynchronously (internal/runs), and the task's id is the
// execution's — which it polls with tasks/get, waits on with tasks/result
// and ends with tasks/cancel. A suspended execution is a task waiting for
// input (input_required): tasks/result answers its suspended document, and
// resume_execution continues it as it would a synchronous one.
//
// mcp-go keeps tasks in the memory of one server, and runs their work on
// a goroutine of the process that took the call: a Lambda container is
// frozen once it answers, and the next request may reach another one. So
// these requests are answered here, from the store of runs every process
// and container shares, before mcp-go sees them; mcp-go only advertises
// the capability (tasks.requests.tools.call and tasks.cancel; not
// tasks.list, which would need an index of every principal's executions).

// taskPollInterval is what tasks suggest between two tasks/get.
const taskPollInterval = time.Second

// taskTTL is how long a task is kept from its last change: a run's record
// lives as long (execution.SuspensionTTL).
var taskTTL = execution.SuspensionTTL

// bufferedResultWait bounds how long tasks/result waits behind a front
// that cannot stream (the HTTP API gives up at 30 s): past it the client is
// told to ask again.
const bufferedResultWait = 25 * time.Second

// jsonrpcMessage is the part of a JSON-RPC request these handlers read.
type jsonrpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// mcpTasks answers the task requests before mcp-go (next) sees the rest.
func (s *Server) mcpTasks(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := s.readBody(w, r)
		if !ok {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg jsonrpcMessage
		if json.Unmarshal(body, &msg) != nil || len(msg.ID) == 0 || msg.JSONRPC != "2.0" {
			next.ServeHTTP(w, r)
			return
		}
		if era := eraOf(msg.Params); era.modern {
			if !s.tasksV2(w, r, msg, era, next) {
				next.ServeHTTP(w, r)
			}
			return
		}
		var answer any
		switch mcp.MCPMethod(msg.Method) {
		case mcp.MethodToolsCall:
			// Only what routes the call first: most calls are no tasks,
			// and mcp-go decodes their (script-sized) arguments itself.
			var route struct {
				Name string          `json:"name"`
				Task *mcp.TaskParams `json:"task"`
			}
			var p mcp.CallToolParams
			if json.Unmarshal(msg.Params, &route) != nil || route.Task == nil || route.Name != "execute_code" ||
				json.Unmarshal(msg.Params, &p) != nil {
				next.ServeHTTP(w, r)
				return
			}
			answer = s.createTask(r.Context(), mcp.CallToolRequest{Params: p})
		case mcp.MethodTasksGet:
			answer = s.taskRequest(r.Context(), msg.Params, s.getTask)
		case mcp.MethodTasksResult:
			answer = s.taskRequest(r.Context(), msg.Params, s.taskResult)
		case mcp.MethodTasksCancel:
			answer = s.taskRequest(r.Context(), msg.Params, s.cancelTask)
		case mcp.MethodTasksList:
			answer = rpcError{Code: mcp.METHOD_NOT_FOUND, Message: "tasks/list is not offered: this server lists no tasks (it advertises no tasks.list); keep the task ids tools/call answered"}
		default:
			next.ServeHTTP(w, r)
			return
		}
		writeRPC(w, msg.ID, answer)
	})
}

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e rpcError) Error() string { return e.Message }

// writeRPC writes one JSON-RPC response: result, or the error when answer
// is an rpcError.
func writeRPC(w http.ResponseWriter, id json.RawMessage, answer any) {
	out := map[string]any{"jsonrpc": "2.0", "id": id}
	if e, ok := answer.(rpcError); ok {
		out["error"] = e
	} else {
		out["result"] = answer
	}
	httpjson.Write(w, http.StatusOK, out)
}

// taskNotFound is what an unknown task (or another principal's) is told.
func taskNotFound(id string) rpcError {
	return rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("Failed to retrieve task: Task not found: %q", id)}
}

// taskRequest reads {taskId} and runs f with it.
func (s *Server) taskRequest(ctx context.Context, params json.RawMessage, f func(context.Context, string) any) any {
	var p struct {
		TaskID string `json:"taskId"`
	}
	if json.Unmarshal(params, &p) != nil || p.TaskID == "" {
		return rpcError{Code: mcp.INVALID_PARAMS, Message: "taskId is missing"}
	}
	return f(ctx, p.TaskID)
}

// createTask starts execute_code as an asynchronous execution and answers
// its task.
func (s *Server) createTask(ctx context.Context, r mcp.CallToolRequest) any {
	raw, _, bad := s.toolArguments(r)
	if bad != nil {
		return rpcError{Code: mcp.INVALID_PARAMS, Message: toolText(bad)}
	}
	req, ferr := execution.Decode(raw, execution.SourceMCP)
	if ferr == nil && req.Async {
		ferr = fault.New(fault.InvalidRequest, "async is not an argument of execute_code: the call is a task already")
	}
	if ferr != nil {
		return rpcError{Code: mcp.INVALID_PARAMS, Message: ferr.Error(), Data: ferr}
	}
	req.Async = true
	req.Principal = execution.PrincipalFrom(ctx)
	req.TraceHeader = execution.TraceHeader(ctx, "")
	resp := s.opts.Service.Execute(ctx, req)
	if !resp.Running() {
		fe := resp.Error
		if fe == nil {
			fe = fault.New(fault.Internal, "the execution did not start")
		}
		return rpcError{Code: mcp.INTERNAL_ERROR, Message: fe.Error(), Data: fe}
	}
	return mcp.CreateTaskResult{Task: taskOf(resp)}
}

// taskOf is the task an execution's document stands for.
func taskOf(doc *execution.Response) mcp.Task {
	ttl, poll := taskTTL.Milliseconds(), taskPollInterval.Milliseconds()
	t := mcp.Task{TaskId: doc.ExecutionID, TTL: &ttl, PollInterval: &poll,
		CreatedAt: doc.CreatedAt.UTC().Format(time.RFC3339), LastUpdatedAt: doc.UpdatedAt.UTC().Format(time.RFC3339)}
	switch {
	case doc.Running() && doc.CancelRequested:
		// Cancelled: it stops at its next step, and ends so.
		t.Status, t.StatusMessage = mcp.TaskStatusCancelled, "cancelled; the script stops at its next step"
	case doc.Running():
		t.Status = mcp.TaskStatusWorking
	case doc.Suspended():
		t.Status = mcp.TaskStatusInputRequired
		t.StatusMessage = fmt.Sprintf("waiting for decisions on %d pending call(s): tasks/result shows them; continue with resume_execution", len(doc.Pending))
	case doc.Status == execution.StatusCancelled:
		t.Status = mcp.TaskStatusCancelled
	case doc.Status == execution.StatusFailed:
		t.Status = mcp.TaskStatusFailed
	default:
		t.Status = mcp.TaskStatusCompleted
	}
	if doc.Error != nil && t.StatusMessage == "" {
		t.StatusMessage = doc.Error.Error()
	}
	return t
}

// document is a task's execution document, or the JSON-RPC error: unknown
// tasks and other principals' read alike.
func (s *Server) document(ctx context.Context, id string) (*execution.Response, *rpcError) {
	doc, ferr := s.opts.Service.Status(ctx, id, execution.PrincipalFrom(ctx))
	switch {
	case ferr == nil:
		return doc, nil
	case ferr.Code == fault.NotFound || ferr.Code == fault.Expired:
		e := taskNotFound(id)
		return nil, &e
	}
	return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: ferr.Error(), Data: ferr}
}

func (s *Server) getTask(ctx context.Context, id string) any {
	doc, e := s.document(ctx, id)
	if e != nil {
		return *e
	}
	return mcp.GetTaskResult{Task: taskOf(doc)}
}

// taskResult waits while the execution runs, then answers what
// execute_code would have: the result, or the suspended document (a task
// waiting for input). Behind a front that cannot stream it waits at most
// bufferedResultWait.
func (s *Server) taskResult(ctx context.Context, id string) any {
	if !s.streams(ctx) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bufferedResultWait)
		defer cancel()
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		doc, e := s.document(context.WithoutCancel(ctx), id)
		if e != nil {
			return *e
		}
		if !doc.Running() {
			res := s.executionResult(doc, s.opts.TextBytes)
			return mcp.TaskResultResult{Result: mcp.Result{Meta: mcp.WithRelatedTask(id)},
				Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return rpcError{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf("task %s is still working: call tasks/result again (or poll tasks/get)", id)}
			}
			return rpcError{Code: mcp.REQUEST_INTERRUPTED, Message: "the request was cancelled"}
		case <-t.C:
		}
	}
}

// cancelTask cancels the execution; a task already ended is refused, as
// the specification asks.
func (s *Server) cancelTask(ctx context.Context, id string) any {
	doc, ferr := s.opts.Service.Cancel(ctx, execution.CancelRequest{ExecutionID: id, Principal: execution.PrincipalFrom(ctx)})
	switch {
	case ferr == nil:
		s.flush(ctx)
		return mcp.CancelTaskResult{Task: taskOf(doc)}
	case ferr.Code == fault.Conflict:
		return rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("Cannot cancel task: already in terminal status (%s)", ferr.Message)}
	case ferr.Code == fault.NotFound || ferr.Code == fault.Forbidden || ferr.Code == fault.Expired:
		return taskNotFound(id)
	}
	return rpcError{Code: mcp.INTERNAL_ERROR, Message: ferr.Error(), Data: ferr}
}

// toolText is a tool result's text, for an error that refuses a call.
func toolText(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			return tc.Text
		}
	}
	return "invalid arguments"
}
