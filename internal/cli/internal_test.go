package cli

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/trace"
)

func TestFlagsFirst(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("store", "", "")
	fs.Bool("v", false, "")
	fs.Duration("timeout", 0, "")
	tests := []struct{ in, want string }{
		{"ex_1 --store file", "--store file -- ex_1"},
		{"--store file ex_1", "--store file -- ex_1"},
		{"ex_1 --store=file -v", "--store=file -v -- ex_1"},
		{"-v ex_1 --timeout 1s", "-v --timeout 1s -- ex_1"},
		{"- --store file", "--store file -- -"},
		{"a -- --store b", "-- a --store b"},
		{"a --nope b", "--nope -- a b"}, // fs.Parse reports --nope
		{"--store", "--store --"},       // fs.Parse reports the missing value
		{"", "--"},
	}
	for _, tc := range tests {
		got := strings.Join(flagsFirst(fs, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("flagsFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// What parse makes of it.
	fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
	store := fs2.String("store", "", "")
	if err := parse(fs2, []string{"ex_1", "--store", "file", "--", "--literal"}); err != nil || *store != "file" || !slices.Equal(fs2.Args(), []string{"ex_1", "--literal"}) {
		t.Errorf("parse: %v, store %q, args %q", err, *store, fs2.Args())
	}
}

func TestLiveProgress(t *testing.T) {
	if startProgress(&bytes.Buffer{}) != nil {
		t.Fatal("a display on something that is not a terminal")
	}
	var p *liveProgress
	p.event(execution.Event{Type: execution.EventCallStart}) // nil: nothing, no panic
	p.finish()

	p = newProgress(&bytes.Buffer{}, time.Hour)
	call := trace.Call{Server: "demo", Tool: "sleep", OK: true}
	p.event(execution.Event{Type: execution.EventCallStart, Call: call})
	p.event(execution.Event{Type: execution.EventCallStart, Call: call})
	p.event(execution.Event{Type: execution.EventCallEnd, Call: call})
	p.event(execution.Event{Type: execution.EventCallEnd, Call: trace.Call{Server: "*", Tool: "*", Count: 3}})
	p.event(execution.Event{Type: execution.EventLog})
	if got, want := p.line(1500*time.Millisecond), "pml: 1.5s · 4 calls done · 0 in flight · 3 failed · last demo:sleep"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
}

// chanWriter hands each write to the test.
type chanWriter chan string

func (c chanWriter) Write(p []byte) (int, error) { c <- string(p); return len(p), nil }

func TestLiveProgressDraws(t *testing.T) {
	w := make(chanWriter, 100)
	p := newProgress(w, time.Hour) // no tick: only changes draw
	p.wg.Add(1)
	go p.loop()
	p.event(execution.Event{Type: execution.EventCallStart, Call: trace.Call{Server: "demo", Tool: "sleep"}})
	for frame := range w {
		if strings.HasPrefix(frame, "\r\033[K") && strings.Contains(frame, "1 in flight · last demo:sleep") {
			break
		}
	}
	p.finish()
	if last := <-w; last != "\r\033[K" {
		t.Errorf("finish wrote %q, want the line cleared", last)
	}
}
