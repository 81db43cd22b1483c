// Package lambdaemu is a small AWS Lambda emulator for end-to-end tests.
//
// It serves the Invoke API (`POST /2015-03-31/functions/{name}/invocations`)
// to AWS SDK clients, and the Lambda Runtime API (`next`, `response`,
// `error`) to real function binaries, which it starts as child processes
// with AWS_LAMBDA_RUNTIME_API pointing at a listener of their own — exactly
// the contract the aws-lambda-go runtime loop speaks in production. Like
// Lambda, it starts another process of a function when every running one
// is busy, up to a per-function cap.
//
// No emulator package is reachable here (SAM CLI, the Runtime Interface
// Emulator and LocalStack all need Docker or downloads), hence this one.
package lambdaemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
}

// Emulator runs functions behind the Invoke API.
type Emulator struct {
	invokeLn net.Listener
	invokeHS *http.Server
	funcs    map[string]*function
	wg       sync.WaitGroup
}

type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
	traceID  string
	result   chan result
}

type result struct {
	body    []byte
	errType string // non-empty: a function error (X-Amz-Function-Error: Unhandled)
}

type function struct {
	cfg     Function
	emu     *Emulator
	queue   chan *invocation
	mu      sync.Mutex
	procs   []*process
	retired []*process // stopped by Recycle
	idle    int
	pending map[string]*invocation
	ln      net.Listener
	hs      *http.Server
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Start serves the Invoke API on a free loopback port and readies the
// functions (processes start on first use).
func Start(fns ...Function) (*Emulator, error) {
	e := &Emulator{funcs: map[string]*function{}}
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
		f := &function{cfg: fc, emu: e, queue: make(chan *invocation, 1024), pending: map[string]*invocation{}}
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
	e.invokeHS = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = e.invokeHS.Serve(ln) }()
	return e, nil
}

// Endpoint is the base URL to give an AWS SDK Lambda client.
func (e *Emulator) Endpoint() string { return "http://" + e.invokeLn.Addr().String() }

// Close stops the listeners and kills every function process.
func (e *Emulator) Close() {
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

func (e *Emulator) invoke(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if i := strings.LastIndex(name, ":function:"); i >= 0 { // accept ARNs
		name = name[i+len(":function:"):]
	}
	f := e.funcs[name]
	if f == nil {
		w.Header().Set("X-Amzn-ErrorType", "ResourceNotFoundException")
		http.Error(w, `{"message":"Function not found: `+name+`"}`, http.StatusNotFound)
		return
	}
	payload, err := io.ReadAll(io.LimitReader(r.Body, 6<<20+1))
	if err != nil || len(payload) > 6<<20 {
		w.Header().Set("X-Amzn-ErrorType", "RequestTooLargeException")
		http.Error(w, `{"message":"payload too large"}`, http.StatusRequestEntityTooLarge)
		return
	}
	inv := &invocation{id: newID(), payload: payload, deadline: time.Now().Add(f.cfg.Timeout),
		traceID: r.Header.Get("X-Amzn-Trace-Id"), result: make(chan result, 1)}
	if err := f.dispatch(inv); err != nil {
		w.Header().Set("X-Amzn-ErrorType", "ServiceException")
		http.Error(w, `{"message":"`+err.Error()+`"}`, http.StatusInternalServerError)
		return
	}
	select {
	case res := <-inv.result:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amz-Executed-Version", "$LATEST")
		if res.errType != "" {
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
		}
		_, _ = w.Write(res.body)
	case <-time.After(time.Until(inv.deadline) + time.Second):
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amz-Function-Error", "Unhandled")
		_, _ = fmt.Fprintf(w, `{"errorType":"Sandbox.Timedout","errorMessage":"Task timed out after %.2f seconds"}`, f.cfg.Timeout.Seconds())
	case <-r.Context().Done():
	}
}

// dispatch queues an invocation, starting a process if none is idle.
func (f *function) dispatch(inv *invocation) error {
	f.mu.Lock()
	needProc := f.idle == 0 && len(f.procs) < f.cfg.MaxConcurrency
	f.mu.Unlock()
	if needProc {
		if err := f.spawn(); err != nil {
			return err
		}
	}
	f.queue <- inv
	return nil
}

func (f *function) spawn() error {
	f.mu.Lock()
	extra := append([]string(nil), f.cfg.Env...)
	f.mu.Unlock()
	cmd := exec.Command(f.cfg.Binary)
	if w := f.cfg.Wrapper; len(w) > 0 {
		cmd = exec.Command(w[0], append(w[1:len(w):len(w)], f.cfg.Binary)...)
	}
	cmd.Env = append(os.Environ(),
		"AWS_LAMBDA_RUNTIME_API="+f.ln.Addr().String(),
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
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return nil
}

// runtimeAPI serves the Runtime API to this function's processes.
func (f *function) runtimeAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.idle++
		f.mu.Unlock()
		var inv *invocation
		select {
		case inv = <-f.queue:
		case <-r.Context().Done():
		}
		f.mu.Lock()
		f.idle--
		if inv != nil {
			f.pending[inv.id] = inv
		}
		f.mu.Unlock()
		if inv == nil {
			return
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
	finish := func(errType string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			body, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			inv := f.pending[id]
			delete(f.pending, id)
			f.mu.Unlock()
			if inv == nil {
				http.Error(w, `{"errorMessage":"unknown request id"}`, http.StatusBadRequest)
				return
			}
			et := errType
			if et != "" {
				if t := r.Header.Get("Lambda-Runtime-Function-Error-Type"); t != "" {
					et = t
				}
				if len(bytes.TrimSpace(body)) == 0 {
					body = []byte(`{"errorType":"` + et + `"}`)
				}
			}
			inv.result <- result{body: body, errType: et}
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"status":"OK"}`))
		}
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", finish(""))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", finish("Unhandled"))
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(f.cfg.Stderr, "lambdaemu: %s init error: %s\n", f.cfg.Name, body)
		w.WriteHeader(http.StatusAccepted)
	})
	return mux
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

// Recycle stops a function's containers, as Lambda does when it scales in
// or replaces them, and returns how many it stopped: the next invocation
// starts a fresh process. Call it while the function is idle.
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
	// A stopped process's waiting /next request ends when the server sees
	// its connection close; until then it would count as idle, and the
	// next invocation would wait for it instead of starting a process.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		f.mu.Lock()
		idle := f.idle
		f.mu.Unlock()
		if idle <= 0 {
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
