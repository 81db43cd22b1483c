package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/httpapi"
)

// stallWritten is how much console output the stalled readers' scripts
// write: 1.8 MB.
const stallWritten = 1_800_000

// stallScript is a script that writes stallWritten bytes of char to the
// console in lines equal lines.
type stallScript struct {
	name  string
	char  string
	lines int
}

func (s stallScript) code() string {
	return fmt.Sprintf(`const s = %q.repeat(%d); for (let i = 0; i < %d; i++) console.log(s)`, s.char, stallWritten/s.lines, s.lines)
}

// stallScripts are the stalled readers' scripts: plain text and
// characters JSON writes six bytes for (\u0001), in 450 lines of 4,000
// bytes, and one line of 1.8 MB (a live event as large as the result).
var stallScripts = []stallScript{{"text", "y", 450}, {"escaped", "\x01", 450}, {"escaped line", "\x01", 1}}

// counted is an executor that counts the executions it finished.
type counted struct {
	execution.Executor
	done atomic.Int64
}

func (c *counted) Execute(ctx context.Context, req execution.Request) *execution.Response {
	resp := c.Executor.Execute(ctx, req)
	c.done.Add(1)
	return resp
}

// stallServer is guardedServer with a counting executor and a write
// deadline long enough that stalled readers stay stalled while the test
// looks at what they hold.
func stallServer(t testing.TB) (*httptest.Server, *counted) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	svc := &counted{Executor: executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log,
		Limits: guest.Limits{LogBytes: 8 << 20}})}
	l := httpapi.ClientLimits{BodyIdle: 5 * time.Second, WriteIdle: 2 * time.Minute}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Service: svc, Logger: log, Streaming: true, Clients: &l}))
	t.Cleanup(srv.Close)
	return srv, svc
}

// stallMode is what the clients of a stallRound do with their streams.
type stallMode int

const (
	readAll       stallMode = iota // read the whole stream and check its result
	stallAtStart                   // read nothing
	stallAtResult                  // read the live events, stop at the result event's first line
)

func (m stallMode) String() string {
	return [...]string{"read all", "stall at start", "stall at result"}[m]
}

// stallRound sends n event-stream requests of the script writing
// script, whose clients do as mode says.
// It returns once every execution ended and every client that stalls
// stalled; release closes their connections and waits for the clients.
func stallRound(t testing.TB, srv *httptest.Server, svc *counted, n int, script stallScript, mode stallMode) (release func()) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": script.code()})
	start := svc.done.Load()
	var (
		wg       sync.WaitGroup
		stalled  sync.WaitGroup // clients at the result event
		released = make(chan struct{})
		conns    = make([]net.Conn, n)
	)
	for i := range n {
		dial := net.Dial
		if mode != readAll {
			dial = smallWindowDial // stops the server's writes almost at once
		}
		c, err := dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		fmt.Fprintf(c, "POST /execute HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		switch mode {
		case stallAtStart:
			continue // reads nothing; release closes the connection
		case stallAtResult:
			stalled.Add(1)
			wg.Go(func() {
				if !readToResult(c) {
					t.Error("the stream ended before its result event")
				}
				stalled.Done()
				<-released
			})
		case readAll:
			wg.Go(func() {
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Errorf("no response head: %v", err)
					return
				}
				defer resp.Body.Close()
				if logs := resultLogs(t, resp.Body); logs != script.lines {
					t.Errorf("the result has %d lines, want %d", logs, script.lines)
				}
			})
		}
	}
	// Every execution ends, whether or not its client reads.
	waitFor(t, 2*time.Minute, func() bool { return svc.done.Load() >= start+int64(n) }, func() string {
		return fmt.Sprintf("%d of %d executions ended", svc.done.Load()-start, n)
	})
	stalled.Wait()
	if mode == readAll {
		wg.Wait()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(released)
			for _, c := range conns {
				_ = c.Close()
			}
			wg.Wait()
		})
	}
}

// waitFor polls cond until it holds, failing the test with what says
// after limit (generous: a verdict on events, not on time).
func waitFor(t testing.TB, limit time.Duration, cond func() bool, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readToResult reads a raw event stream, response head included, in
// small reads up to the line that names the result event, and reports
// whether it got there. It keeps no more than its 4 KiB buffer.
func readToResult(c net.Conn) bool {
	br := bufio.NewReaderSize(c, 4096)
	atLineStart := true
	const mark = "event: " + httpapi.EventResult + "\n"
	for {
		line, err := br.ReadSlice('\n')
		if atLineStart && string(line) == mark {
			return true
		}
		switch {
		case err == nil:
			atLineStart = true
		case errors.Is(err, bufio.ErrBufferFull):
			atLineStart = false // the rest of a long line
		default:
			return false
		}
	}
}

// resultLogs reads an event stream to its result and returns how many
// log lines the result holds.
func resultLogs(t testing.TB, r io.Reader) int {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok && name == httpapi.EventResult {
			var res struct {
				OK   bool              `json:"ok"`
				Logs []json.RawMessage `json:"logs"`
			}
			if err := json.Unmarshal([]byte(v), &res); err != nil || !res.OK {
				t.Errorf("result: %v %.200s", err, v)
			}
			return len(res.Logs)
		}
	}
	t.Errorf("no result event: %v", sc.Err())
	return -1
}

// smallWindowDial dials addr as smallWindowConn does.
func smallWindowDial(network, addr string) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	return d.Dial(network, addr)
}

// heldMemory is the live Go heap after a collection and the process's
// resident memory after returning freed pages to the system.
func heldMemory() (heap, rss uint64) {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, vmRSS()
}

// peakSampler samples memory every 10 ms until stopped and keeps the
// largest heap and resident size. Collecting at every sample
// (heldMemory), it sees what is live at the worst moment, not the
// garbage the collector's pacing lets pile up; without, what the process
// holds as it runs.
type peakSampler struct {
	heap, rss uint64
	stop      chan struct{}
	done      chan struct{}
}

func samplePeaks(collect bool) *peakSampler {
	p := &peakSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			h, r := heldMemory()
			if !collect {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				h, r = ms.HeapAlloc, vmRSS()
			}
			p.heap, p.rss = max(p.heap, h), max(p.rss, r)
			select {
			case <-p.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return p
}

func (p *peakSampler) peaks() (heap, rss uint64) {
	close(p.stop)
	<-p.done
	return p.heap, p.rss
}

// settle waits until the live heap stops growing (the handlers are past
// encoding their answers and wait on their clients): two samples 100 ms
// apart within 1 %, or 20 s.
func settle() {
	heap, _ := heldMemory()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		h, _ := heldMemory()
		if h <= heap+heap/100 {
			return
		}
		heap = h
	}
}

func vmRSS() uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// stallFigures is what n stalled readers held each, as a multiple of
// the bytes their execution wrote, over the same server idle after n
// readers that read everything (so the engine's pool and the server's
// buffers have grown to n already; the guest's linear memory is mapped
// outside the Go heap).
type stallFigures struct {
	// held is the live heap (after a collection) once the stall settled:
	// what the stalled readers keep for as long as they stall.
	held float64
	// peakHeap and peakRSS are the live heap's and resident memory's
	// largest samples through the executions, the writing of their
	// answers and the stall (sampled after collections when collect,
	// else as the collector's pacing leaves them).
	peakHeap, peakRSS float64
}

// stalledHeld measures what n readers of script, whose clients stall as mode says, hold per reader. While
// they stall, the host still answers other clients (checked with
// checkLive, if given).
func stalledHeld(t testing.TB, srv *httptest.Server, svc *counted, n int, script stallScript, mode stallMode, collect bool, checkLive func()) stallFigures {
	t.Helper()
	// The plain text's: as many executions, streams and connections,
	// whose escaped text would only cost the clients time to parse.
	stallRound(t, srv, svc, n, stallScripts[0], readAll)()
	heap0, rss0 := heldMemory()
	peaks := samplePeaks(collect)
	release := stallRound(t, srv, svc, n, script, mode)
	defer release()
	settle()
	heapPeak, rssPeak := peaks.peaks()
	heap1, _ := heldMemory()
	if f := os.Getenv("PML_STALL_HEAP_PROFILE"); f != "" {
		if out, err := os.Create(f); err == nil {
			_ = pprof.Lookup("heap").WriteTo(out, 0)
			out.Close()
		}
	}
	if checkLive != nil {
		checkLive()
	}
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) / stallWritten }
	return stallFigures{held: per(heap0, heap1), peakHeap: per(heap0, heapPeak), peakRSS: per(rss0, rssPeak)}
}

// stallBound is the most a stalled reader may hold, as a multiple of
// what its execution wrote (issue 34).
const stallBound = 1.5

// TestStalledReadersHoldBoundedMemory: clients that stop reading the
// event stream of a script writing 1.8 MB of console output (at once, or
// once the result event began) hold about what it wrote (the result's
// lines), not copies of it: the result event is written as it is
// encoded, never whole in a buffer, even where its JSON is six times the
// text. Measured in live heap after collections, never in time. While
// they stall, the host answers other clients; once they leave, nothing
// of theirs is left running.
func TestStalledReadersHoldBoundedMemory(t *testing.T) {
	const readers = 16
	for _, mode := range []stallMode{stallAtStart, stallAtResult} {
		for _, sc := range stallScripts {
			t.Run(mode.String()+"/"+sc.name, func(t *testing.T) {
				defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
				srv, svc := stallServer(t)
				f := stalledHeld(t, srv, svc, readers, sc, mode, true, func() { checkLive(t, srv) })
				t.Logf("per stalled reader: live heap held %.2f×, at the peak %.2f× (resident %.2f×) what its execution wrote (%d bytes)",
					f.held, f.peakHeap, f.peakRSS, stallWritten)
				// Under the race detector only what is held is judged (the
				// peak measured 1.6-2.7x there, 1.12-1.20x without it).
				if f.held > stallBound || (!raceEnabled && f.peakHeap > stallBound) {
					t.Errorf("each stalled reader held %.2f× what its execution wrote in live heap, %.2f× at the peak; want at most %.1f×", f.held, f.peakHeap, stallBound)
				}
				srv.Close() // waits for the handlers, which the released clients ended
			})
		}
	}
}

// checkLive fails the test unless srv answers a plain execution and an
// event stream read to its end (the bound is the test's, not a speed
// target).
func checkLive(t testing.TB, srv *httptest.Server) {
	t.Helper()
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Post(srv.URL+"/execute", "application/json", strings.NewReader(`{"code": "return 1+1"}`))
	if err != nil {
		t.Fatalf("the host does not answer while readers stall: %v", err)
	}
	var doc struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || !doc.OK || string(doc.Result) != "2" {
		t.Fatalf("while readers stall, return 1+1 answered %d %+v (%v)", resp.StatusCode, doc, err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/execute", strings.NewReader(`{"code": "console.log('x'); return 1+1"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatalf("no event stream while readers stall: %v", err)
	}
	defer resp.Body.Close()
	if logs := resultLogs(t, resp.Body); logs != 1 {
		t.Errorf("while readers stall, a stream's result has %d lines, want 1", logs)
	}
}

// BenchmarkStalledReaders reports what 60 stalled readers hold each, as
// a multiple of the 1.8 MB their script wrote: the live heap once the
// stall settled (held-x), the live heap and resident memory at the worst
// moment sampled after collections (live-x, live-rss-x), and the heap
// and resident memory as the collector's pacing leaves them (heap-x,
// rss-x: what the process holds).
func BenchmarkStalledReaders(b *testing.B) {
	for _, mode := range []stallMode{stallAtStart, stallAtResult} {
		for _, sc := range stallScripts {
			b.Run(strings.ReplaceAll(mode.String(), " ", "-")+"/"+sc.name, func(b *testing.B) {
				for range b.N {
					srv, svc := stallServer(b)
					live := stalledHeld(b, srv, svc, 60, sc, mode, true, nil)
					paced := stalledHeld(b, srv, svc, 60, sc, mode, false, nil)
					b.ReportMetric(live.held, "held-x")
					b.ReportMetric(live.peakHeap, "live-x")
					b.ReportMetric(live.peakRSS, "live-rss-x")
					b.ReportMetric(paced.peakHeap, "heap-x")
					b.ReportMetric(paced.peakRSS, "rss-x")
					srv.Close()
				}
			})
		}
	}
}
