package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// MCP tasks, 2026-07-28 form: the io.modelcontextprotocol/tasks extension
// (SEP-2663), beside 2025-11-25's tasks (tasks.go). A 2026-07-28 request
// whose client declares the extension (in its _meta's clientCapabilities)
// gets server-directed tasks: execute_code answers a flat CreateTaskResult
// (resultType "task") at once, the execution running asynchronously as a
// 2025-11-25 task's does; tasks/get answers the task with its result, its
// error or, while it waits, its questions (inputRequests): the approvals it
// waits for and the questions remote servers asked, as execute_code's own
// input_required would put them (elicit.go, question.go); tasks/update
// delivers the client's user's answers, which resume the execution as that
// user's decisions (execution.ChannelClient); tasks/cancel ends it. So a
// task client is asked rather than told to call resume_execution. A
// 2026-07-28 request without the extension gets no task, and the task
// methods refuse it (MissingRequiredClientCapability); tasks/result and
// tasks/list are not part of the extension. Like 2025-11-25's, these are
// answered from the store of runs every process and container shares.

// tasksExtension names the extension in capabilities.extensions.
const tasksExtension = "io.modelcontextprotocol/tasks"

// methodTasksUpdate delivers a task's answers (the extension's; mcp-go's
// 2025-11-25 task methods have no such method).
const methodTasksUpdate mcp.MCPMethod = "tasks/update"

// requestEra is what a request's _meta says of its protocol.
type requestEra struct {
	version string
	modern  bool // 2026-07-28 or later
	tasks   bool // its client declares the tasks extension
}

// eraOf reads a request's _meta.
func eraOf(params json.RawMessage) requestEra {
	var p struct {
		Meta struct {
			Version string `json:"io.modelcontextprotocol/protocolVersion"`
			Caps    struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
			} `json:"io.modelcontextprotocol/clientCapabilities"`
		} `json:"_meta"`
	}
	_ = json.Unmarshal(params, &p)
	_, tasks := p.Meta.Caps.Extensions[tasksExtension]
	return requestEra{version: p.Meta.Version, modern: mcp.IsModernProtocol(p.Meta.Version), tasks: tasks}
}

// tasksV2 answers a 2026-07-28 request on the tasks surface, or reports
// false for mcp-go to serve it.
func (s *Server) tasksV2(w http.ResponseWriter, r *http.Request, msg jsonrpcMessage, era requestEra, next http.Handler) bool {
	method := mcp.MCPMethod(msg.Method)
	switch method {
	case mcp.MethodToolsCall:
		var route struct {
			Name string `json:"name"`
		}
		if !era.tasks || json.Unmarshal(msg.Params, &route) != nil || route.Name != "execute_code" {
			// No extension, no task: mcp-go answers the call, without a
			// 2025-11-25 task hint, which 2026-07-28 does not honour
			// (mcp-go would run a task of its own, in this process only).
			withoutTaskHint(r, msg)
			return false
		}
	case mcp.MethodServerDiscover:
		discoverWithoutV1Tasks(w, r, next)
		return true
	case mcp.MethodTasksGet, methodTasksUpdate, mcp.MethodTasksCancel:
	case mcp.MethodTasksResult, mcp.MethodTasksList:
		writeRPC(w, msg.ID, rpcError{Code: mcp.METHOD_NOT_FOUND, Message: msg.Method + " is not part of the io.modelcontextprotocol/tasks extension: tasks/get answers the result"})
		return true
	default:
		return false
	}
	if e := checkHeaders(r, era.version, method, msg.Params); e != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "error": e})
		return true
	}
	if !era.tasks {
		writeRPC(w, msg.ID, rpcError{Code: mcp.MISSING_REQUIRED_CLIENT_CAPABILITY,
			Message: msg.Method + " needs the io.modelcontextprotocol/tasks extension, which this request's client does not declare",
			Data:    map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}}})
		return true
	}
	ctx := r.Context()
	var answer any
	switch method {
	case mcp.MethodToolsCall:
		var p mcp.CallToolParams
		if err := json.Unmarshal(msg.Params, &p); err != nil {
			answer = rpcError{Code: mcp.INVALID_PARAMS, Message: err.Error()}
			break
		}
		answer = s.createTaskV2(ctx, mcp.CallToolRequest{Params: p})
	case mcp.MethodTasksGet:
		answer = s.taskRequest(ctx, msg.Params, s.getTaskV2)
	case methodTasksUpdate:
		answer = s.updateTask(ctx, msg.Params)
	case mcp.MethodTasksCancel:
		answer = s.taskRequest(ctx, msg.Params, s.cancelTaskV2)
	}
	writeRPC(w, msg.ID, answer)
	return true
}

// checkHeaders checks a 2026-07-28 request's Mcp-Method and Mcp-Name
// headers against its body (SEP-2243): the task methods name their task
// (SEP-2663). mcp-go checks those of the requests it serves; these it does
// not see.
func checkHeaders(r *http.Request, version string, method mcp.MCPMethod, params json.RawMessage) *rpcError {
	mismatch := func(err error) *rpcError {
		return &rpcError{Code: mcp.HEADER_MISMATCH, Message: err.Error()}
	}
	if err := mcp.ValidateStandardHeaders(r.Header.Get, version, method, params); err != nil {
		return mismatch(err)
	}
	if method == mcp.MethodToolsCall {
		return nil
	}
	var p struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(params, &p)
	name, ok := mcp.DecodeHeaderValue(r.Header.Get(mcp.HeaderName))
	switch {
	case r.Header.Get(mcp.HeaderName) == "":
		return mismatch(mcp.HeaderMismatchError{Header: mcp.HeaderName, Reason: "missing required header: the task methods carry the task id"})
	case !ok || name != p.TaskID:
		return mismatch(mcp.HeaderMismatchError{Header: mcp.HeaderName, Reason: fmt.Sprintf("header value %q does not match the body's taskId %q", name, p.TaskID)})
	}
	return nil
}

// taskV2 is a task as the extension sends it: a flat object.
func taskV2(doc *execution.Response) map[string]any {
	t := taskOf(doc)
	out := map[string]any{"taskId": t.TaskId, "status": t.Status, "createdAt": t.CreatedAt, "lastUpdatedAt": t.LastUpdatedAt,
		"ttlMs": taskTTL.Milliseconds(), "pollIntervalMs": taskPollInterval.Milliseconds()}
	if t.StatusMessage != "" {
		out["statusMessage"] = t.StatusMessage
	}
	if doc.Suspended() {
		out["statusMessage"] = fmt.Sprintf("waiting for answers about %d pending call(s): inputRequests asks them; answer with tasks/update", len(doc.Pending))
	}
	return out
}

// createTaskV2 starts execute_code as a task: asynchronously, recorded
// before the answer (so tasks/get finds it at once), and, where this server
// keeps suspended executions, with its questions put to the task's client
// rather than refused.
func (s *Server) createTaskV2(ctx context.Context, r mcp.CallToolRequest) any {
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
	if s.opts.Suspends && req.Approval == "" {
		req.Approval = execution.ApprovalSuspend
	}
	resp := s.opts.Service.Execute(ctx, req)
	if !resp.Running() {
		fe := resp.Error
		if fe == nil {
			fe = fault.New(fault.Internal, "the execution did not start")
		}
		return rpcError{Code: mcp.INTERNAL_ERROR, Message: fe.Error(), Data: fe}
	}
	out := taskV2(resp)
	out["resultType"] = "task"
	return out
}

// getTaskV2 is tasks/get: the task, with its result when it completed, its
// error when the host lost it, its questions while it waits.
func (s *Server) getTaskV2(ctx context.Context, id string) any {
	doc, e := s.document(ctx, id)
	if e != nil {
		return *e
	}
	out := taskV2(doc)
	out["resultType"] = "complete"
	switch {
	case doc.Suspended():
		requests, ferr := s.taskQuestions(ctx, id)
		if ferr != nil {
			return rpcError{Code: mcp.INTERNAL_ERROR, Message: ferr.Error(), Data: ferr}
		}
		out["inputRequests"] = requests
	case doc.Status == execution.StatusFailed:
		fe := doc.Error
		if fe == nil {
			fe = fault.New(fault.Internal, "the execution was lost")
		}
		out["error"] = rpcError{Code: mcp.INTERNAL_ERROR, Message: fe.Error(), Data: fe}
	case doc.Ended() && doc.Status != execution.StatusCancelled:
		res := s.executionResult(doc, s.opts.TextBytes)
		out["result"] = map[string]any{"resultType": "complete", "content": res.Content, "structuredContent": res.StructuredContent, "isError": res.IsError}
	}
	return out
}

// taskQuestions are a waiting task's inputRequests: one elicitation per
// call waiting for approval, the remote servers' own questions for calls
// waiting for answers, keyed as execute_code's input_required keys them.
func (s *Server) taskQuestions(ctx context.Context, id string) (mcp.InputRequests, *fault.Error) {
	waiting, ferr := s.opts.Service.Waiting(ctx, id)
	if ferr != nil {
		return nil, ferr
	}
	b := server.NewInputRequestBuilder("")
	for _, p := range waiting.Pending {
		if p.Reason == execution.PendingQuestion {
			forwardQuestions(b, p)
			continue
		}
		b.Elicit(elicitID(p.CallID), mcp.ElicitationParams{Message: question(p, waiting), RequestedSchema: decisionSchema(maxGrantOf(waiting))})
	}
	return b.ToolResult().InputRequests, nil
}

// updateTask is tasks/update: the client's user's answers to the task's
// questions resume the execution, as that user's decisions, from the
// version they were asked about; calls not answered stay pending, so the
// task waits on for them. It answers once the resumed run has ended or
// waits again (tasks/get then says which).
func (s *Server) updateTask(ctx context.Context, params json.RawMessage) any {
	var p struct {
		TaskID         string             `json:"taskId"`
		InputResponses mcp.InputResponses `json:"inputResponses"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.TaskID == "" {
		return rpcError{Code: mcp.INVALID_PARAMS, Message: "tasks/update takes taskId and inputResponses"}
	}
	if _, e := s.document(ctx, p.TaskID); e != nil {
		return *e
	}
	waiting, ferr := s.opts.Service.Waiting(ctx, p.TaskID)
	if ferr != nil {
		return rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("task %s is not waiting for input: %s", p.TaskID, ferr.Message), Data: ferr}
	}
	decisions := map[string]execution.Decision{}
	for _, pc := range waiting.Pending {
		if res := server.ElicitationResponse(p.InputResponses, elicitID(pc.CallID)); res != nil {
			addAnswer(decisions, pc.CallID, res)
		} else if d, ok := answersOf(p.InputResponses, pc.CallID); ok {
			decisions[strconv.Itoa(pc.CallID)] = d
		}
	}
	if len(decisions) == 0 {
		return rpcError{Code: mcp.INVALID_PARAMS, Message: "inputResponses answer none of the task's inputRequests (tasks/get lists them)"}
	}
	rr := execution.ResumeRequest{ExecutionID: p.TaskID, Decisions: decisions, Principal: execution.PrincipalFrom(ctx),
		TraceHeader: execution.TraceHeader(ctx, ""), Channel: execution.ChannelClient, Version: waiting.StateVersion}
	if _, ferr := s.opts.Service.Resume(ctx, rr); ferr != nil {
		return rpcError{Code: mcp.INVALID_PARAMS, Message: ferr.Error(), Data: ferr}
	}
	s.flush(ctx)
	return map[string]any{"resultType": "complete"}
}

// cancelTaskV2 is tasks/cancel: an empty acknowledgement, for a task that
// had ended too; tasks/get shows what became of it.
func (s *Server) cancelTaskV2(ctx context.Context, id string) any {
	_, ferr := s.opts.Service.Cancel(ctx, execution.CancelRequest{ExecutionID: id, Principal: execution.PrincipalFrom(ctx)})
	switch {
	case ferr == nil:
		s.flush(ctx)
	case ferr.Code == fault.Conflict:
	case ferr.Code == fault.NotFound || ferr.Code == fault.Forbidden || ferr.Code == fault.Expired:
		return taskNotFound(id)
	default:
		return rpcError{Code: mcp.INTERNAL_ERROR, Message: ferr.Error(), Data: ferr}
	}
	return map[string]any{"resultType": "complete"}
}

// withoutTaskHint drops a 2025-11-25 task hint (params.task) from a
// 2026-07-28 tools/call before mcp-go reads it.
func withoutTaskHint(r *http.Request, msg jsonrpcMessage) {
	var params map[string]json.RawMessage
	if json.Unmarshal(msg.Params, &params) != nil || params["task"] == nil {
		return
	}
	delete(params, "task")
	var body map[string]json.RawMessage
	raw, _ := io.ReadAll(r.Body)
	if json.Unmarshal(raw, &body) != nil {
		r.Body = io.NopCloser(bytes.NewReader(raw))
		return
	}
	body["params"], _ = json.Marshal(params)
	raw, _ = json.Marshal(body)
	r.Body = io.NopCloser(bytes.NewReader(raw))
	r.ContentLength = int64(len(raw))
}

// discoverWithoutV1Tasks serves server/discover through next, without the
// 2025-11-25 tasks capability mcp-go puts beside the extension: a
// 2026-07-28 client learns of tasks from the extension alone (SEP-2663),
// while 2025-11-25 clients, which initialize, still see theirs.
func discoverWithoutV1Tasks(w http.ResponseWriter, r *http.Request, next http.Handler) {
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	var msg map[string]json.RawMessage
	var res map[string]json.RawMessage
	var caps map[string]json.RawMessage
	body := rec.Body.Bytes()
	if json.Unmarshal(body, &msg) == nil && json.Unmarshal(msg["result"], &res) == nil && json.Unmarshal(res["capabilities"], &caps) == nil {
		delete(caps, "tasks")
		res["capabilities"], _ = json.Marshal(caps)
		msg["result"], _ = json.Marshal(res)
		body, _ = json.Marshal(msg)
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body)
}
