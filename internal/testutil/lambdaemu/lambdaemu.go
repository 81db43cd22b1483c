// Package lambdaemu is a small AWS Lambda emulator for end-to-end tests.
//
// It serves the Invoke API to AWS SDK clients — synchronous invocations
// (`POST /2015-03-31/functions/{name}/invocations`), asynchronous ones
// (the same with `X-Amz-Invocation-Type: Event`: accepted with 202, queued,
// retried when the function fails, as Lambda does) and streamed ones
// (`POST /2021-11-15/functions/{name}/response-streaming-invocations`, the
// InvokeWithResponseStream API API Gateway's streaming integrations use:
// an event stream of PayloadChunk events as the function writes, then
// InvokeComplete) — and the Lambda Runtime API (`next`, `response`,
// `error`) to real function binaries, which it starts as child processes
// with AWS_LAMBDA_RUNTIME_API pointing at it — exactly the contract the
// aws-lambda-go runtime loop speaks in production. A response posted with
// chunked transfer encoding (how aws-lambda-go posts a handler's io.Reader,
// and what `Lambda-Runtime-Function-Response-Mode: streaming` announces)
// reaches a streaming caller chunk by chunk as the function sends it; a
// mid-stream failure arrives in the request's trailers
// (Lambda-Runtime-Function-Error-Type and -Body), as Lambda reads it. Like
// Lambda, it starts another process of a function when every running one
// is busy, up to a per-function cap, and fails the invocation a process
// held when it dies.
//
// No emulator package is reachable here (SAM CLI, the Runtime Interface
// Emulator and LocalStack all need Docker or downloads), hence this one.
package lambdaemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go/eventstream"
)

// Function describes one function binary.
type Function struct {
	Name   string
	Binary string // path to the bootstrap binary
	// Wrapper, when set, is a command line the binary is started under,
	// such as qemu-user for a binary of another architecture: the process
	// runs Wrapper[0] with Wrapper[1:] and then Binary as arguments.
	Wrapper []string
	Env     []string      // extra environment (KEY=VALUE)
	Timeout time.Duration // per invocation (default 30 s)
	// MaxConcurrency caps the processes of this function (default 4).
	MaxConcurrency int
	// Stderr receives the processes' logs (default os.Stderr).
	Stderr io.Writer
	// AsyncRetries is how often an asynchronous invocation that failed
	// (a function error, a timeout, a process that died) is delivered
	// again: Lambda's MaximumRetryAttempts (default 2; -1 for none).
	AsyncRetries int
	// AsyncRetryDelay is the wait before a retry (Lambda waits a minute,
	// then two; default 100 ms).
	AsyncRetryDelay time.Duration
	// AsyncDuplicates delivers every asynchronous invocation this many
	// more times, at once, as Lambda may ("at least once").
	AsyncDuplicates int
	// Tags are what the ListTags API answers for the function.
	Tags map[string]string
}

// Emulator runs functions behind the Invoke API.
type Emulator struct {
	invokeLn net.Listener
	invokeHS *http.Server
	funcs    map[string]*function
	wg       sync.WaitGroup
	stop     chan struct{}
}

type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
	traceID  string
	// chunks carries a streamed response's body as it is posted, for a
	// streaming caller (nil for the others). Every chunk is sent before
	// the invocation ends.
	chunks chan []byte
	// gone is closed when the caller stopped reading.
	gone chan struct{}
	// ended is closed once res is the invocation's result.
	ended chan struct{}
	res   result
	once  sync.Once
}

type result struct {
	body    []byte
	errType string // non-empty: a function error (X-Amz-Function-Error: Unhandled)
}

// finish ends the invocation with res, once; a second result (a process
// dying after it answered, an answer after the timeout) is dropped.
func (inv *invocation) finish(res result) {
	inv.once.Do(func() {
		inv.res = res
		close(inv.ended)
	})
}

type function struct {
	cfg     Function
	emu     *Emulator
	queue   chan *invocation
	mu      sync.Mutex
	procs   []*process
	retired []*process // stopped by Recycle
	next    int        // numbers processes
	ln      net.Listener
	hs      *http.Server
	// async counts asynchronous deliveries that ended.
	async int
}

type process struct {
	n    int
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	held *invocation // the invocation the process took and has not answered
	// waiting counts its /next requests waiting for work (under its
	// function's mu).
	waiting int
}

// Start serves the Invoke API on a free loopback port and readies the
// functions (processes start on first use).
func Start(fns ...Function) (*Emulator, error) {
	e := &Emulator{funcs: map[string]*function{}, stop: make(chan struct{})}
	for _, fc := range fns {
		if fc.Timeout <= 0 {
			fc.Timeout = 30 * time.Second
		}
		if fc.MaxConcurrency <= 0 {
			fc.MaxConcurrency = 4
		}
		if fc.Stderr == nil {
			fc.Stderr = os.Stderr
		}
		switch {
		case fc.AsyncRetries == 0:
			fc.AsyncRetries = 2
		case fc.AsyncRetries < 0:
			fc.AsyncRetries = 0
		}
		if fc.AsyncRetryDelay <= 0 {
			fc.AsyncRetryDelay = 100 * time.Millisecond
		}
		f := &function{cfg: fc, emu: e, queue: make(chan *invocation, 1024)}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			e.Close()
			return nil, err
		}
		f.ln = ln
		f.hs = &http.Server{Handler: f.runtimeAPI(), ReadHeaderTimeout: 5 * time.Second}
		e.funcs[fc.Name] = f
		e.wg.Add(1)
		go func() { defer e.wg.Done(); _ = f.hs.Serve(ln) }()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.Close()
		return nil, err
	}
	e.invokeLn = ln
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", e.invoke)
	mux.HandleFunc("POST /2021-11-15/functions/{name}/response-streaming-invocations", e.invokeStream)
	mux.HandleFunc("GET /2017-03-31/tags/{name}", e.listTags)
	e.invokeHS = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = e.invokeHS.Serve(ln) }()
	return e, nil
}

// Endpoint is the base URL to give an AWS SDK Lambda client.
func (e *Emulator) Endpoint() string { return "http://" + e.invokeLn.Addr().String() }

// Close stops the listeners and kills every function process.
func (e *Emulator) Close() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	if e.invokeHS != nil {
		_ = e.invokeHS.Close()
	}
	for _, f := range e.funcs {
		_ = f.hs.Close()
		f.mu.Lock()
		procs := f.procs
		f.mu.Unlock()
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	e.wg.Wait()
}

// lookup finds the function a request names (a name or an ARN), or
// answers 404.
func (e *Emulator) lookup(w http.ResponseWriter, r *http.Request) *function {
	name := r.PathValue("name")
	if i := strings.LastIndex(name, ":function:"); i >= 0 { // accept ARNs
		name = name[i+len(":function:"):]
	}
	f := e.funcs[name]
	if f == nil {
		w.Header().Set("X-Amzn-ErrorType", "ResourceNotFoundException")
		http.Error(w, `{"message":"Function not found: `+name+`"}`, http.StatusNotFound)
	}
	return f
}

// listTags answers the ListTags API (GET /2017-03-31/tags/{ARN}) with
// the function's Tags.
func (e *Emulator) listTags(w http.ResponseWriter, r *http.Request) {
	f := e.lookup(w, r)
	if f == nil {
		return
	}
	tags := f.cfg.Tags
	if tags == nil {
		tags = map[string]string{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"Tags": tags})
}

// readPayload reads an invocation's payload (at most 6 MB, Lambda's limit
// for synchronous invocations; 1 MB for asynchronous ones), or answers 413.
func readPayload(w http.ResponseWriter, r *http.Request, limit int) ([]byte, bool) {
	payload, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil || len(payload) > limit {
		w.Header().Set("X-Amzn-ErrorType", "RequestTooLargeException")
		http.Error(w, `{"message":"payload too large"}`, http.StatusRequestEntityTooLarge)
		return nil, false
	}
	return payload, true
}

func (f *function) newInvocation(payload []byte, traceID string, stream bool) *invocation {
	inv := &invocation{id: newID(), payload: payload, deadline: time.Now().Add(f.cfg.Timeout), traceID: traceID,
		gone: make(chan struct{}), ended: make(chan struct{})}
	if stream {
		inv.chunks = make(chan []byte, 16)
	}
	return inv
}

// wait returns the invocation's result, or a timeout's when the function
// overran its timeout (Lambda stops it then).
func (f *function) wait(inv *invocation) result {
	t := time.NewTimer(time.Until(inv.deadline) + time.Second)
	defer t.Stop()
	select {
	case <-inv.ended:
	case <-t.C:
		inv.finish(result{errType: "Sandbox.Timedout", body: fmt.Appendf(nil, `{"errorType":"Sandbox.Timedout","errorMessage":"Task timed out after %.2f seconds"}`, f.cfg.Timeout.Seconds())})
	}
	return inv.res
}

func (e *Emulator) invoke(w http.ResponseWriter, r *http.Request) {
	f := e.lookup(w, r)
	if f == nil {
		return
	}
	if r.Header.Get("X-Amz-Invocation-Type") == "Event" {
		payload, ok := readPayload(w, r, 1<<20)
		if !ok {
			return
		}
		f.invokeAsync(payload, r.Header.Get("X-Amzn-Trace-Id"))
		w.WriteHeader(http.StatusAccepted)
		return
	}
	payload, ok := readPayload(w, r, 6<<20)
	if !ok {
		return
	}
	inv := f.newInvocation(payload, r.Header.Get("X-Amzn-Trace-Id"), false)
	defer close(inv.gone)
	if err := f.dispatch(inv); err != nil {
		w.Header().Set("X-Amzn-ErrorType", "ServiceException")
		http.Error(w, `{"message":"`+err.Error()+`"}`, http.StatusInternalServerError)
		return
	}
	res := f.wait(inv)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	if res.errType != "" {
		w.Header().Set("X-Amz-Function-Error", "Unhandled")
	}
	_, _ = w.Write(res.body)
}

// invokeAsync queues an asynchronous invocation: each delivery (and each
// duplicate) runs until it succeeds or its retries are spent.
func (f *function) invokeAsync(payload []byte, traceID string) {
	for range 1 + f.cfg.AsyncDuplicates {
		f.emu.wg.Add(1)
		go func() {
			defer f.emu.wg.Done()
			defer func() { f.mu.Lock(); f.async++; f.mu.Unlock() }()
			for attempt := 0; attempt <= f.cfg.AsyncRetries; attempt++ {
				if attempt > 0 {
					select {
					case <-time.After(f.cfg.AsyncRetryDelay):
					case <-f.emu.stop:
						return
					}
				}
				inv := f.newInvocation(payload, traceID, false)
				if err := f.dispatch(inv); err != nil {
					fmt.Fprintf(f.cfg.Stderr, "lambdaemu: %s: asynchronous invocation not dispatched: %v\n", f.cfg.Name, err)
					continue
				}
				var res result
				select {
				case <-inv.ended:
					res = inv.res
				case <-f.emu.stop:
					return
				case <-time.After(time.Until(inv.deadline) + time.Second):
					inv.finish(result{errType: "Sandbox.Timedout"})
					res = inv.res
				}
				close(inv.gone)
				if res.errType == "" {
					return
				}
				fmt.Fprintf(f.cfg.Stderr, "lambdaemu: %s: asynchronous invocation failed (%s), attempt %d\n", f.cfg.Name, res.errType, attempt+1)
			}
		}()
	}
}

// AsyncDone is how many asynchronous deliveries of function name have
// ended (succeeded, or failed their last retry), duplicates included.
func (e *Emulator) AsyncDone(name string) int {
	f := e.funcs[name]
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.async
}

// invokeStream serves InvokeWithResponseStream: 200 with an event stream
// of the response's chunks as the function posts them, then InvokeComplete
// (with the function's error, if it failed: before or while streaming).
func (e *Emulator) invokeStream(w http.ResponseWriter, r *http.Request) {
	f := e.lookup(w, r)
	if f == nil {
		return
	}
	payload, ok := readPayload(w, r, 6<<20)
	if !ok {
		return
	}
	inv := f.newInvocation(payload, r.Header.Get("X-Amzn-Trace-Id"), true)
	defer close(inv.gone)
	if err := f.dispatch(inv); err != nil {
		w.Header().Set("X-Amzn-ErrorType", "ServiceException")
		http.Error(w, `{"message":"`+err.Error()+`"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := eventstream.NewEncoder()
	send := func(event, contentType string, body []byte) bool {
		var h eventstream.Headers
		h.Set(":message-type", eventstream.StringValue("event"))
		h.Set(":event-type", eventstream.StringValue(event))
		h.Set(":content-type", eventstream.StringValue(contentType))
		if err := enc.Encode(w, eventstream.Message{Headers: h, Payload: body}); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	complete := func() {
		// Every chunk was sent before the end: what is buffered goes
		// first.
		for {
			select {
			case chunk := <-inv.chunks:
				if !send("PayloadChunk", "application/octet-stream", chunk) {
					return
				}
				continue
			default:
			}
			break
		}
		c := map[string]string{}
		if inv.res.errType != "" {
			c["ErrorCode"] = inv.res.errType
			c["ErrorDetails"] = string(inv.res.body)
		}
		body, _ := json.Marshal(c)
		send("InvokeComplete", "application/json", body)
	}
	timeout := time.NewTimer(time.Until(inv.deadline) + time.Second)
	defer timeout.Stop()
	for {
		select {
		case chunk := <-inv.chunks:
			if !send("PayloadChunk", "application/octet-stream", chunk) {
				return
			}
		case <-inv.ended:
			complete()
			return
		case <-timeout.C:
			inv.finish(result{errType: "Sandbox.Timedout"})
		case <-r.Context().Done():
			return
		}
	}
}

// dispatch queues an invocation, starting a process if none is idle.
func (f *function) dispatch(inv *invocation) error {
	f.mu.Lock()
	needProc := f.roomLocked()
	f.mu.Unlock()
	if needProc {
		if err := f.spawn(); err != nil {
			return err
		}
	}
	f.queue <- inv
	return nil
}

// roomLocked reports whether an invocation needs a new process and may
// have one: none is idle, and fewer than MaxConcurrency are alive (a dead
// one no longer counts, as Lambda starts a new environment in its place).
// f.mu must be held.
func (f *function) roomLocked() bool {
	return idleLocked(f.procs) == 0 && idleLocked(f.retired) == 0 && len(f.procs)-f.exitedLocked() < f.cfg.MaxConcurrency
}

// idleLocked counts the /next requests of procs waiting for work; a
// stopped process's counts until its handler sees it gone. Their
// function's mu must be held.
func idleLocked(procs []*process) int {
	n := 0
	for _, p := range procs {
		n += p.waiting
	}
	return n
}

// exitedLocked counts the listed processes that have exited. f.mu must be
// held.
func (f *function) exitedLocked() int {
	n := 0
	for _, p := range f.procs {
		select {
		case <-p.done:
			n++
		default:
		}
	}
	return n
}

// replace starts a process in place of one that exited while
// invocations still wait and no process is idle to take them; without
// it they would wait until the next dispatch.
func (f *function) replace() {
	f.mu.Lock()
	need := len(f.queue) > 0 && f.roomLocked()
	f.mu.Unlock()
	if need {
		_ = f.spawn() // a binary that cannot start fails its callers by their timeout
	}
}

func (f *function) spawn() error {
	// f.mu is held from numbering the process until it is listed, so a
	// process that asks for work before Start returns is known: its
	// request waits on f.mu instead of meeting "unknown process" (which
	// made the runtime exit and stranded the invocation it was started
	// for until the caller's timeout).
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.emu.stop: // checked under f.mu, so Close sees every process started
		return errors.New("lambdaemu: the emulator is closed")
	default:
	}
	extra := append([]string(nil), f.cfg.Env...)
	f.next++
	n := f.next
	cmd := exec.Command(f.cfg.Binary)
	if w := f.cfg.Wrapper; len(w) > 0 {
		cmd = exec.Command(w[0], append(w[1:len(w):len(w)], f.cfg.Binary)...)
	}
	cmd.Env = append(os.Environ(),
		// Each process has an address of its own (aws-lambda-go joins it
		// into its URLs as given), so the emulator knows which
		// invocation a process held when it dies.
		"AWS_LAMBDA_RUNTIME_API="+f.ln.Addr().String()+"/p"+strconv.Itoa(n),
		"AWS_LAMBDA_FUNCTION_NAME="+f.cfg.Name,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1024",
		"AWS_LAMBDA_LOG_FORMAT=JSON",
		"_HANDLER=bootstrap",
	)
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stdout = f.cfg.Stderr
	cmd.Stderr = f.cfg.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", f.cfg.Binary, err)
	}
	p := &process{n: n, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		held := p.held
		p.held = nil
		p.mu.Unlock()
		if held != nil {
			// Lambda fails the invocation of a runtime that exited.
			msg := fmt.Sprintf("Runtime exited with error: %v", err)
			held.finish(result{errType: "Runtime.ExitError", body: fmt.Appendf(nil, `{"errorType":"Runtime.ExitError","errorMessage":%q}`, msg)})
		}
		close(p.done)
		// A pause first, so a binary that dies at start is retried at a
		// bounded rate rather than in a loop until its callers time out.
		time.AfterFunc(50*time.Millisecond, f.replace)
	}()
	f.procs = append(f.procs, p)
	return nil
}

// proc finds the process of a Runtime API request by its path prefix.
func (f *function) proc(r *http.Request) *process {
	n, err := strconv.Atoi(strings.TrimPrefix(r.PathValue("proc"), "p"))
	if err != nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range append(f.procs, f.retired...) {
		if p.n == n {
			return p
		}
	}
	return nil
}

// runtimeAPI serves the Runtime API to this function's processes, each
// under its own path prefix.
func (f *function) runtimeAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{proc}/2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		p := f.proc(r)
		if p == nil {
			http.Error(w, `{"errorMessage":"unknown process"}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		p.waiting++
		f.mu.Unlock()
		var inv *invocation
	wait:
		for {
			select {
			case inv = <-f.queue:
				select {
				case <-inv.gone: // its caller left: the next one
					inv = nil
					continue
				default:
				}
				break wait
			case <-r.Context().Done():
				break wait
			case <-p.done:
				break wait
			}
		}
		f.mu.Lock()
		p.waiting--
		f.mu.Unlock()
		if inv == nil {
			return
		}
		p.mu.Lock()
		p.held = inv
		p.mu.Unlock()
		select {
		case <-p.done:
			// It died as it took the invocation: someone else's.
			f.queue <- inv
			return
		default:
		}
		h := w.Header()
		h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
		h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
		h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:"+f.cfg.Name)
		if inv.traceID != "" {
			h.Set("Lambda-Runtime-Trace-Id", inv.traceID)
		}
		h.Set("Content-Type", "application/json")
		_, _ = w.Write(inv.payload)
	})
	held := func(r *http.Request) (*process, *invocation) {
		p := f.proc(r)
		if p == nil {
			return nil, nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		inv := p.held
		if inv == nil || inv.id != r.PathValue("id") {
			return p, nil
		}
		return p, inv
	}
	release := func(p *process) {
		p.mu.Lock()
		p.held = nil
		p.mu.Unlock()
	}
	mux.HandleFunc("POST /{proc}/2018-06-01/runtime/invocation/{id}/response", func(w http.ResponseWriter, r *http.Request) {
		p, inv := held(r)
		if inv == nil {
			http.Error(w, `{"errorMessage":"unknown request id"}`, http.StatusBadRequest)
			return
		}
		var res result
		if inv.chunks != nil {
			res = stream(r, inv)
		} else {
			body, _ := io.ReadAll(r.Body)
			res = result{body: body}
			if et := r.Trailer.Get("Lambda-Runtime-Function-Error-Type"); et != "" {
				res = trailerError(r, et)
			}
		}
		release(p)
		inv.finish(res)
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"OK"}`))
	})
	mux.HandleFunc("POST /{proc}/2018-06-01/runtime/invocation/{id}/error", func(w http.ResponseWriter, r *http.Request) {
		p, inv := held(r)
		if inv == nil {
			http.Error(w, `{"errorMessage":"unknown request id"}`, http.StatusBadRequest)
			return
		}
		body, _ := io.ReadAll(r.Body)
		et := r.Header.Get("Lambda-Runtime-Function-Error-Type")
		if et == "" {
			et = "Unhandled"
		}
		if len(bytes.TrimSpace(body)) == 0 {
			body = []byte(`{"errorType":"` + et + `"}`)
		}
		release(p)
		inv.finish(result{body: body, errType: et})
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"OK"}`))
	})
	mux.HandleFunc("POST /{proc}/2018-06-01/runtime/init/error", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(f.cfg.Stderr, "lambdaemu: %s init error: %s\n", f.cfg.Name, body)
		w.WriteHeader(http.StatusAccepted)
	})
	return mux
}

// stream passes a response's body to a streaming caller as it arrives,
// and returns its end: the error its trailers carry, if any.
func stream(r *http.Request, inv *invocation) result {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			select {
			case inv.chunks <- bytes.Clone(buf[:n]):
			case <-inv.gone:
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return result{errType: "Runtime.TruncatedResponse", body: fmt.Appendf(nil, `{"errorMessage":%q}`, err.Error())}
		}
	}
	if et := r.Trailer.Get("Lambda-Runtime-Function-Error-Type"); et != "" {
		return trailerError(r, et)
	}
	return result{}
}

// trailerError is the failure a response's trailers report: the runtime
// failed after it started sending.
func trailerError(r *http.Request, errType string) result {
	body, err := base64.StdEncoding.DecodeString(r.Trailer.Get("Lambda-Runtime-Function-Error-Body"))
	if err != nil || len(body) == 0 {
		body = []byte(`{"errorType":"` + errType + `"}`)
	}
	return result{errType: errType, body: body}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ErrNoFunction is returned for an unknown function name.
var ErrNoFunction = errors.New("lambdaemu: no such function")

// Invoke is a convenience for tests that do not go through the SDK.
func (e *Emulator) Invoke(ctx context.Context, name string, payload []byte) ([]byte, bool, error) {
	if e.funcs[name] == nil {
		return nil, false, ErrNoFunction
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Endpoint()+"/2015-03-31/functions/"+name+"/invocations", bytes.NewReader(payload))
	if err != nil {
		return nil, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.Header.Get("X-Amz-Function-Error") != "", err
}

// CPUTime is the user and system CPU time used by the function processes
// that have exited (after Close, all of them): what a process did, whatever
// the load of the machine it shared.
func (e *Emulator) CPUTime() time.Duration {
	var d time.Duration
	for _, f := range e.funcs {
		f.mu.Lock()
		for _, p := range append(f.retired, f.procs...) {
			select {
			case <-p.done:
				d += p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
			default:
			}
		}
		f.mu.Unlock()
	}
	return d
}

// Exited returns how many of a function's processes have exited without
// Recycle stopping them: a process that died (a crash, a fatal error),
// which Lambda would replace with a cold container.
func (e *Emulator) Exited(name string) int {
	f := e.funcs[name]
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exitedLocked()
}

// Recycle stops a function's containers, as Lambda does when it scales in
// or replaces them, and returns how many it stopped: the next invocation
// starts a fresh process. An invocation a stopped process held fails
// (Runtime.ExitError), as on Lambda.
func (e *Emulator) Recycle(name string) (int, error) {
	f := e.funcs[name]
	if f == nil {
		return 0, ErrNoFunction
	}
	f.mu.Lock()
	procs := f.procs
	f.procs = nil
	f.retired = append(f.retired, procs...)
	f.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	// A stopped process's waiting /next request ends when its handler sees
	// the process gone; until then it would count as idle, and the next
	// invocation would wait for it instead of starting a process. Only the
	// stopped ones are waited for: a process started since (a retry's) may
	// be idle all along.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		f.mu.Lock()
		waiting := idleLocked(procs)
		f.mu.Unlock()
		if waiting == 0 {
			return len(procs), nil
		}
	}
	return len(procs), errors.New("lambdaemu: a stopped process still counts as waiting for work")
}

// SetEnv adds environment variables (KEY=VALUE) to every function's
// processes started from now on — for values known only once the emulator
// listens, such as its own endpoint for functions that invoke others.
func (e *Emulator) SetEnv(kv ...string) {
	for _, f := range e.funcs {
		f.mu.Lock()
		f.cfg.Env = append(f.cfg.Env, kv...)
		f.mu.Unlock()
	}
}
