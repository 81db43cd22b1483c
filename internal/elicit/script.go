package elicit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Script answers questions with answers written beforehand (pml run
// --answers FILE), for scripts and tests. The document is JSON, one of:
//
//   - an array: the answers to the questions in the order they are asked,
//     whoever asks;
//   - an object keyed by "server:tool" (or "server:*" for any question of
//     that server), each value an answer or an array of answers to that
//     tool's questions in the order it asks them.
//
// An answer is "accept", "decline" or "cancel", or {"action": "accept",
// "content": {...}}: an accepted form takes the form's defaults for the
// fields it leaves out, so "accept" alone accepts every default. A
// question the document has no answer left for is cancelled (and said so
// on the log).
type Script struct {
	log io.Writer

	mu     sync.Mutex
	seq    []Result
	byTool map[string][]Result
}

// ParseScript reads an answers document; log (may be nil) is told of
// questions it has no answer for.
func ParseScript(data []byte, log io.Writer) (*Script, error) {
	s := &Script{log: log}
	data = bytes.TrimSpace(data)
	switch {
	case len(data) == 0:
		return nil, errors.New("the answers document is empty")
	case data[0] == '[':
		seq, err := parseAnswers(data)
		if err != nil {
			return nil, err
		}
		s.seq = seq
	case data[0] == '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("the answers document: %w", err)
		}
		s.byTool = map[string][]Result{}
		for key, raw := range m {
			server, tool, ok := strings.Cut(key, ":")
			if !ok || server == "" || tool == "" {
				return nil, fmt.Errorf("the answers document: key %q is not server:tool (or server:*)", key)
			}
			raw = bytes.TrimSpace(raw)
			if len(raw) > 0 && raw[0] != '[' {
				raw = append(append([]byte{'['}, raw...), ']')
			}
			seq, err := parseAnswers(raw)
			if err != nil {
				return nil, fmt.Errorf("the answers document: %s: %w", key, err)
			}
			s.byTool[key] = seq
		}
	default:
		return nil, errors.New(`the answers document is an array of answers, or an object of answers keyed by "server:tool"`)
	}
	return s, nil
}

// parseAnswers reads an array of answers.
func parseAnswers(data []byte) ([]Result, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, fmt.Errorf("the answers document: %w", err)
	}
	out := make([]Result, 0, len(raws))
	for i, raw := range raws {
		r, err := parseAnswer(raw)
		if err != nil {
			return nil, fmt.Errorf("answer %d: %w", i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseAnswer(raw json.RawMessage) (Result, error) {
	var r Result
	var action string
	if json.Unmarshal(raw, &action) == nil {
		r.Action = action
	} else {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return Result{}, fmt.Errorf(`an answer is "accept", "decline", "cancel" or {"action": …, "content": {…}}: %w`, err)
		}
	}
	switch r.Action {
	case Accept:
	case Decline, Cancel:
		if len(r.Content) > 0 {
			return Result{}, fmt.Errorf("a %s has no content", r.Action)
		}
	default:
		return Result{}, fmt.Errorf("the action is accept, decline or cancel, not %q", r.Action)
	}
	return r, nil
}

// Answer implements Answerer: the next answer for q, completed.
func (s *Script) Answer(_ context.Context, q Question) (Result, error) {
	r, ok := s.next(q)
	if !ok {
		if s.log != nil {
			fmt.Fprintf(s.log, "pml: no answer left in --answers for %s's question; cancelled\n", printable(q.Who(), 200, false))
		}
		return Result{Action: Cancel}, nil
	}
	done, err := Complete(q.Params, r)
	if err != nil {
		return Result{}, fmt.Errorf("the --answers answer to %s's question: %w", q.Who(), err)
	}
	return done, nil
}

func (s *Script) next(q Question) (Result, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byTool == nil {
		if len(s.seq) == 0 {
			return Result{}, false
		}
		r := s.seq[0]
		s.seq = s.seq[1:]
		return r, true
	}
	for _, key := range []string{q.Server + ":" + q.Tool, q.Server + ":*"} {
		if q.Tool == "" && key != q.Server+":*" {
			continue
		}
		if seq := s.byTool[key]; len(seq) > 0 {
			s.byTool[key] = seq[1:]
			return seq[0], true
		}
	}
	return Result{}, false
}
