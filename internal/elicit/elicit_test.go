package elicit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sep1034 is the conformance suite's SEP-1034 question: every field has a
// default and none is required.
const sep1034 = `{"message": "Test client default value handling - please accept with defaults",
 "requestedSchema": {"type": "object", "properties": {
  "name": {"type": "string", "description": "User name", "default": "John Doe"},
  "age": {"type": "integer", "description": "User age", "default": 30},
  "score": {"type": "number", "description": "User score", "default": 95.5},
  "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
  "verified": {"type": "boolean", "description": "Verification status", "default": true}}, "required": []}}`

// signup has required fields without defaults, bounds, formats and both
// kinds of choice.
const signup = `{"message": "Sign up", "requestedSchema": {"type": "object", "properties": {
  "email": {"type": "string", "format": "email", "title": "Email"},
  "age": {"type": "integer", "minimum": 18, "maximum": 99},
  "plan": {"type": "string", "oneOf": [{"const": "p1", "title": "Basic"}, {"const": "p2", "title": "Pro"}], "default": "p1"},
  "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 2},
  "news": {"type": "boolean"}}, "required": ["email", "age"]}}`

func TestComplete(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		in           Result
		want         map[string]any
		wantErr      string
	}{
		{"accept takes every default", sep1034, Result{Action: Accept},
			map[string]any{"name": "John Doe", "age": 30.0, "score": 95.5, "status": "active", "verified": true}, ""},
		{"what is given stays", sep1034, Result{Action: Accept, Content: map[string]any{"age": 41.0, "verified": false}},
			map[string]any{"name": "John Doe", "age": 41.0, "score": 95.5, "status": "active", "verified": false}, ""},
		{"a decline carries nothing", sep1034, Result{Action: Decline, Content: map[string]any{"age": 1.0}}, nil, ""},
		{"a required field left out", signup, Result{Action: Accept, Content: map[string]any{"email": "a@b.c"}}, nil, "missing property 'age'"},
		{"out of bounds", signup, Result{Action: Accept, Content: map[string]any{"email": "a@b.c", "age": 12.0}}, nil, "age"},
		{"not a choice", sep1034, Result{Action: Accept, Content: map[string]any{"status": "gone"}}, nil, "status"},
		{"wrong type", sep1034, Result{Action: Accept, Content: map[string]any{"age": "thirty"}}, nil, "age"},
		{"an unknown action", sep1034, Result{Action: "yes"}, nil, "accept, decline or cancel"},
		{"URL mode", `{"mode": "url", "message": "go", "url": "https://x.invalid"}`, Result{Action: Accept}, nil, "URL mode"},
		{"a form that is no object", `{"message": "m", "requestedSchema": {"type": "string"}}`, Result{Action: Accept}, nil, "not an object"},
		{"a form too deep to compile", `{"message": "m", "requestedSchema": ` + strings.Repeat(`{"items":`, 200) + `{}` + strings.Repeat(`}`, 200) + `}`,
			Result{Action: Accept}, nil, "form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Complete(json.RawMessage(tc.params), tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Action != tc.in.Action || !reflect.DeepEqual(got.Content, tc.want) {
				t.Errorf("got %+v; want %s %v", got, tc.in.Action, tc.want)
			}
		})
	}
}

func TestScript(t *testing.T) {
	q := func(server, tool string) Question {
		return Question{Server: server, Tool: tool, Params: json.RawMessage(sep1034)}
	}
	t.Run("in the order asked", func(t *testing.T) {
		var log strings.Builder
		s, err := ParseScript([]byte(`["accept", {"action": "accept", "content": {"age": 5}}, "decline"]`), &log)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tool := range []string{"a", "b", "c", "d"} {
			r, err := s.Answer(context.Background(), q("s", tool))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(r)
			got = append(got, string(b))
		}
		want := []string{
			`{"action":"accept","content":{"age":30,"name":"John Doe","score":95.5,"status":"active","verified":true}}`,
			`{"action":"accept","content":{"age":5,"name":"John Doe","score":95.5,"status":"active","verified":true}}`,
			`{"action":"decline"}`, `{"action":"cancel"}`,
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("answers %v; want %v", got, want)
		}
		if !strings.Contains(log.String(), "no answer left in --answers for s:d's question") {
			t.Errorf("the log does not say the last question was cancelled: %q", log.String())
		}
	})
	t.Run("by tool", func(t *testing.T) {
		s, err := ParseScript([]byte(`{"s:a": ["decline", "accept"], "s:*": "cancel", "t:b": {"action": "accept", "content": {"age": 1}}}`), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			q    Question
			want string
		}{
			{q("s", "a"), Decline}, {q("t", "b"), Accept}, {q("s", "a"), Accept},
			{q("s", ""), Cancel}, // the server's own question: s:* only
			{q("s", "a"), Cancel}, {q("t", "b"), Cancel},
		} {
			r, err := s.Answer(context.Background(), c.q)
			if err != nil || r.Action != c.want {
				t.Errorf("%s: %+v, %v; want %s", c.q.Who(), r, err, c.want)
			}
		}
	})
	t.Run("an answer that does not fit", func(t *testing.T) {
		s, err := ParseScript([]byte(`[{"action": "accept", "content": {"age": "old"}}]`), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Answer(context.Background(), q("s", "a")); err == nil || !strings.Contains(err.Error(), "s:a") {
			t.Errorf("err %v; want one naming the question", err)
		}
	})
	for _, bad := range []string{``, `null`, `3`, `"accept"`, `["yes"]`, `[{"action": "accept", "extra": 1}]`,
		`[{"action": "decline", "content": {"a": 1}}]`, `{"no-colon": "accept"}`, `{":t": "accept"}`, `{"s:": "accept"}`, `[`} {
		if _, err := ParseScript([]byte(bad), io.Discard); err == nil {
			t.Errorf("ParseScript(%q) accepted it", bad)
		}
	}
}

// typist feeds a Terminal line by line and collects what it shows.
type typist struct {
	w   *io.PipeWriter
	out *lockedBuffer
	t   *Terminal
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newTypist(t *testing.T, hold func() func()) *typist {
	r, w := io.Pipe()
	ty := &typist{w: w, out: &lockedBuffer{}}
	ty.t = NewTerminal(r, ty.out, hold)
	t.Cleanup(func() {
		_ = w.Close()
		ty.t.Close()
		_ = r.Close()
	})
	return ty
}

// answer types lines (in a goroutine: the pipe blocks until read) and
// asks q.
func (ty *typist) answer(ctx context.Context, q Question, lines ...string) (Result, error) {
	go func() {
		for _, l := range lines {
			if _, err := io.WriteString(ty.w, l+"\n"); err != nil {
				return
			}
		}
	}()
	return ty.t.Answer(ctx, q)
}

func TestTerminal(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		params string
		lines  []string
		want   Result
		shown  []string // what the person must have been shown
	}{
		{"Enter takes every default", sep1034, []string{"", "", "", "", "", ""},
			Result{Action: Accept, Content: map[string]any{"name": "John Doe", "age": 30.0, "score": 95.5, "status": "active", "verified": true}},
			[]string{"s:t asks:", "please accept with defaults", "User name (text) (optional) [John Doe]:", "one of: 1) active, 2) inactive, 3) pending", "[yes]", "[a]ccept"}},
		{"typed values, choices by number and title", signup,
			[]string{"not-an-email", "ann@example.com", "12", "30.5", "30", "pro", "a, c, a", "y", ""},
			Result{Action: Accept, Content: map[string]any{"email": "ann@example.com", "age": 30.0, "plan": "p2", "tags": []any{"a", "c"}, "news": true}},
			[]string{"✗ not an email address", "✗ out of range: from 18 to 99", "✗ not a whole number", "1) Basic [p1], 2) Pro [p2]", "(sent)"}},
		{"a required field cannot be skipped", signup, []string{"", "b@c.d", "40", "", "", "", "d"},
			Result{Action: Decline}, []string{"✗ an answer is required", "(declined)"}},
		{"end of input cancels", signup, []string{"x@y.z"}, Result{Action: Cancel}, nil},
		{"cancel", sep1034, []string{"", "", "", "", "", "c"}, Result{Action: Cancel}, []string{"(cancelled)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ty := newTypist(t, nil)
			if tc.name == "end of input cancels" {
				go func() {
					_, _ = io.WriteString(ty.w, "x@y.z\n")
					_ = ty.w.Close()
				}()
				tc.lines = nil
			}
			got, err := ty.answer(ctx, Question{Server: "s", Tool: "t", Params: json.RawMessage(tc.params)}, tc.lines...)
			if err != nil {
				t.Fatal(err)
			}
			if got.Action != tc.want.Action || !reflect.DeepEqual(got.Content, tc.want.Content) {
				t.Errorf("got %+v; want %+v", got, tc.want)
			}
			for _, s := range tc.shown {
				if !strings.Contains(ty.out.String(), s) {
					t.Errorf("the terminal shows\n%s\nwithout %q", ty.out.String(), s)
				}
			}
		})
	}
}

// TestTerminalHostileText: a server's question cannot drive the person's
// terminal: escape sequences, other control characters and bidirectional
// overrides in its message, titles and choices are shown replaced.
func TestTerminalHostileText(t *testing.T) {
	params := `{"message": "Approve?\u001b]0;pwned\u0007\u001b[2J\r\u202eevil", "requestedSchema": {"type": "object", "properties": {
		"x\u001b[31m": {"type": "string", "title": "T\u001b[1A", "enum": ["a\u009b1m"], "description": "d\u0008"}}}}`
	ty := newTypist(t, nil)
	if _, err := ty.answer(context.Background(), Question{Server: "s", Params: json.RawMessage(params)}, "1", "c"); err != nil {
		t.Fatal(err)
	}
	shown := ty.out.String()
	for _, bad := range []string{"\x1b", "\a", "\r", "\u202e", "\u009b", "\b"} {
		if strings.Contains(shown, bad) {
			t.Errorf("the terminal was sent %q:\n%q", bad, shown)
		}
	}
	if !strings.Contains(shown, "Approve?") || !strings.Contains(shown, "evil") {
		t.Errorf("the message is not shown: %q", shown)
	}
}

// TestTerminalOneAtATime: questions asked at once are put one after the
// other, each with the progress display held.
func TestTerminalOneAtATime(t *testing.T) {
	var mu sync.Mutex
	held, maxHeld := 0, 0
	hold := func() func() {
		mu.Lock()
		held++
		maxHeld = max(maxHeld, held)
		mu.Unlock()
		return func() {
			mu.Lock()
			held--
			mu.Unlock()
		}
	}
	ty := newTypist(t, hold)
	go func() {
		for range 2 {
			_, _ = io.WriteString(ty.w, "\n\n\n\n\n\n")
		}
	}()
	var wg sync.WaitGroup
	results := make([]Result, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = ty.t.Answer(context.Background(), Question{Server: "s", Params: json.RawMessage(sep1034)})
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.Action != Accept || r.Content["name"] != "John Doe" {
			t.Errorf("result %+v", r)
		}
	}
	if maxHeld != 1 || held != 0 {
		t.Errorf("holds at once: %d, left held: %d", maxHeld, held)
	}
	if n := strings.Count(ty.out.String(), "s asks:"); n != 2 {
		t.Errorf("asked %d times:\n%s", n, ty.out.String())
	}
}

// TestTerminalDeadline: a question whose call ends stops waiting.
func TestTerminalDeadline(t *testing.T) {
	ty := newTypist(t, nil)
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, errors.New("the call's deadline"))
	defer cancel()
	_, err := ty.t.Answer(ctx, Question{Server: "s", Params: json.RawMessage(sep1034)})
	if err == nil || !strings.Contains(err.Error(), "the call's deadline") {
		t.Errorf("err %v; want the deadline's cause", err)
	}
}
