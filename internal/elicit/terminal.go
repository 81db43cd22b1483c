package elicit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
)

// maxTries bounds how often one form is asked again after an answer that
// does not fit it.
const maxTries = 3

// Terminal asks the person at a terminal: the question's message, then
// each field of its form with what it takes and its default (Enter takes
// the default), then whether to send the answer (accept), decline or
// cancel. End of input cancels. Questions asked at once are put one at a
// time. What the server wrote is shown with its control characters
// replaced: a question must not rewrite the person's screen.
type Terminal struct {
	out io.Writer
	in  io.Reader
	// hold, when set, pauses whatever else draws on the terminal (the
	// live progress line) while a question is on it.
	hold func() (release func())

	mu        sync.Mutex // one question at a time
	startOnce sync.Once
	lines     chan string // closed at the end of input
	done      chan struct{}
	closeOnce sync.Once
}

// NewTerminal returns a Terminal reading answers from in and writing
// prompts to out. hold may be nil.
func NewTerminal(in io.Reader, out io.Writer, hold func() (release func())) *Terminal {
	return &Terminal{in: in, out: out, hold: hold, done: make(chan struct{})}
}

// Close stops handing out lines. A read already waiting on the terminal
// ends only with its input (a process that exits ends it).
func (t *Terminal) Close() {
	t.closeOnce.Do(func() { close(t.done) })
}

// read returns the next line the person typed; ok is false at the end of
// input. The reader runs in a goroutine of its own (a read from a
// terminal cannot be cancelled), started on the first question, so that a
// question whose call ends (its deadline) stops waiting.
func (t *Terminal) read(ctx context.Context) (line string, ok bool, err error) {
	t.startOnce.Do(func() {
		t.lines = make(chan string)
		go func() {
			defer close(t.lines)
			sc := bufio.NewScanner(t.in)
			for sc.Scan() {
				select {
				case t.lines <- sc.Text():
				case <-t.done:
					return
				}
			}
		}()
	})
	select {
	case <-ctx.Done():
		return "", false, context.Cause(ctx)
	case <-t.done:
		return "", false, nil
	case l, ok := <-t.lines:
		return strings.TrimSpace(l), ok, nil
	}
}

// Answer implements Answerer.
func (t *Terminal) Answer(ctx context.Context, q Question) (Result, error) {
	f, err := parseForm(q.Params)
	if err != nil {
		return Result{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hold != nil {
		defer t.hold()()
	}
	fmt.Fprintf(t.out, "\n%s asks:\n", printable(q.Who(), 200, false))
	for _, l := range strings.Split(printable(f.message, 4000, true), "\n") {
		fmt.Fprintf(t.out, "  │ %s\n", l)
	}
	for range maxTries {
		r, err := t.fill(ctx, f)
		if err != nil || r.Action != Accept {
			if err == nil {
				fmt.Fprintf(t.out, "  (%s)\n", map[string]string{Decline: "declined", Cancel: "cancelled"}[r.Action])
			}
			return r, err
		}
		done, err := Complete(q.Params, r)
		if err == nil {
			fmt.Fprintln(t.out, "  (sent)")
			return done, nil
		}
		fmt.Fprintf(t.out, "  ✗ %s — once more:\n", printable(err.Error(), 400, false))
	}
	fmt.Fprintln(t.out, "  (cancelled)")
	return Result{Action: Cancel}, nil
}

// fill asks each field and then the action.
func (t *Terminal) fill(ctx context.Context, f *form) (Result, error) {
	content := map[string]any{}
	for _, fd := range f.fields {
		for {
			prompt := "  " + fd.label()
			if fd.description != "" {
				prompt += " — " + printable(fd.description, 300, false)
			}
			prompt += " (" + fd.hint() + ")"
			if !fd.required {
				prompt += " (optional)"
			}
			if d := fd.defaultShown(); d != "" {
				prompt += " [" + d + "]"
			}
			fmt.Fprint(t.out, prompt+": ")
			line, ok, err := t.read(ctx)
			if err != nil {
				fmt.Fprintln(t.out)
				return Result{}, err
			}
			if !ok {
				fmt.Fprintln(t.out)
				return Result{Action: Cancel}, nil
			}
			if line == "" {
				if len(fd.def) > 0 {
					var v any
					if json.Unmarshal(fd.def, &v) == nil {
						content[fd.name] = v
					}
					break
				}
				if fd.required {
					fmt.Fprintln(t.out, "  ✗ an answer is required")
					continue
				}
				break
			}
			v, err := fd.parse(line)
			if err != nil {
				fmt.Fprintf(t.out, "  ✗ %s\n", err)
				continue
			}
			content[fd.name] = v
			break
		}
	}
	for {
		fmt.Fprint(t.out, "  Send it? [a]ccept, [d]ecline, [c]ancel (Enter: accept): ")
		line, ok, err := t.read(ctx)
		if err != nil {
			fmt.Fprintln(t.out)
			return Result{}, err
		}
		if !ok {
			fmt.Fprintln(t.out)
			return Result{Action: Cancel}, nil
		}
		switch strings.ToLower(line) {
		case "", "a", "accept", "y", "yes":
			return Result{Action: Accept, Content: content}, nil
		case "d", "decline", "n", "no":
			return Result{Action: Decline}, nil
		case "c", "cancel":
			return Result{Action: Cancel}, nil
		}
	}
}
