package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/pml-sandbox/pml/internal/execution"
)

// liveProgress shows a running script's progress on one line of a
// terminal: elapsed time, calls done and in flight, the latest call. The
// service's events only update counters (they must not block, and a
// terminal can: Ctrl-S); one goroutine draws, on each change and every
// tick so the clock moves.
type liveProgress struct {
	w     io.Writer
	start time.Time
	tick  time.Duration

	mu                   sync.Mutex
	done, inflight, fail int
	last                 string

	changed chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup

	// drawMu orders drawing with pause: while a question is on the
	// terminal (paused), nothing is drawn over it.
	drawMu sync.Mutex
	paused bool
}

// startProgress returns a running display on w when w is a terminal (a
// pipe or a file gets nothing, not even escape codes), else nil, whose
// methods do nothing.
func startProgress(w io.Writer) *liveProgress {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	p := newProgress(w, 100*time.Millisecond)
	p.wg.Add(1)
	go p.loop()
	return p
}

func newProgress(w io.Writer, tick time.Duration) *liveProgress {
	return &liveProgress{w: w, start: time.Now(), tick: tick, changed: make(chan struct{}, 1), stop: make(chan struct{})}
}

// event implements execution.Request.OnEvent.
func (p *liveProgress) event(e execution.Event) {
	if p == nil || e.Type == execution.EventLog {
		return
	}
	p.mu.Lock()
	switch e.Type {
	case execution.EventCallStart:
		p.inflight++
		p.last = e.Call.Server + ":" + e.Call.Tool
	case execution.EventCallEnd:
		p.inflight = max(p.inflight-1, 0)
		p.done += max(e.Call.Count, 1)
		if !e.Call.OK {
			p.fail += max(e.Call.Count, 1)
		}
	}
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *liveProgress) loop() {
	defer p.wg.Done()
	t := time.NewTicker(p.tick)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.changed:
		case <-t.C:
		}
		p.drawMu.Lock()
		if !p.paused {
			_, _ = io.WriteString(p.w, "\r\033[K"+p.line(time.Since(p.start)))
		}
		p.drawMu.Unlock()
	}
}

// hold clears the line and stops drawing until the returned func is
// called: a question is being asked on the terminal (elicit.Terminal).
func (p *liveProgress) hold() (release func()) {
	if p == nil {
		return func() {}
	}
	p.drawMu.Lock()
	p.paused = true
	_, _ = io.WriteString(p.w, "\r\033[K")
	p.drawMu.Unlock()
	return func() {
		p.drawMu.Lock()
		p.paused = false
		p.drawMu.Unlock()
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// progressSlot holds the display a command is showing, if any, for a
// terminal prompt made before the display starts (the answerer is wired
// with the service, the display with the run).
type progressSlot struct {
	mu   sync.Mutex
	live *liveProgress
}

func (s *progressSlot) set(p *liveProgress) {
	s.mu.Lock()
	s.live = p
	s.mu.Unlock()
}

// hold pauses the display shown now, if any.
func (s *progressSlot) hold() (release func()) {
	s.mu.Lock()
	p := s.live
	s.mu.Unlock()
	return p.hold()
}

// line renders the state after elapsed.
func (p *liveProgress) line(elapsed time.Duration) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("pml: %.1fs · %d calls done · %d in flight", elapsed.Seconds(), p.done, p.inflight)
	if p.fail > 0 {
		s += fmt.Sprintf(" · %d failed", p.fail)
	}
	if p.last != "" {
		s += " · last " + p.last
	}
	return s
}

// finish stops the display and clears its line, so the terminal holds
// only what the command printed.
func (p *liveProgress) finish() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	_, _ = io.WriteString(p.w, "\r\033[K")
}
