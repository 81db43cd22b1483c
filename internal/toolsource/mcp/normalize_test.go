package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestNormalizeResult(t *testing.T) {
	cases := []struct {
		name      string
		raw       string
		parseText bool
		want      string
		isErr     bool
		msg       string
	}{
		{"structured wins", `{"content":[{"type":"text","text":"3"}],"structuredContent":{"sum":3}}`, false, `{"sum":3}`, false, ""},
		{"single text is a string", `{"content":[{"type":"text","text":"hi <b>"}]}`, false, `"hi <b>"`, false, ""},
		{"JSON text stays a string", `{"content":[{"type":"text","text":"{\"a\":1}"}]}`, false, `"{\"a\":1}"`, false, ""},
		{"JSON text parsed on request", `{"content":[{"type":"text","text":" {\"a\":1} "}]}`, true, `{"a":1}`, false, ""},
		{"non-JSON text with parse", `{"content":[{"type":"text","text":"not json"}]}`, true, `"not json"`, false, ""},
		{"empty text with parse", `{"content":[{"type":"text","text":""}]}`, true, `""`, false, ""},
		{"no content", `{"content":[]}`, false, `null`, false, ""},
		{"null structured ignored", `{"content":[{"type":"text","text":"x"}],"structuredContent":null}`, false, `"x"`, false, ""},
		{"image", `{"content":[{"type":"image","data":"aGk=","mimeType":"image/png","annotations":{"priority":1}}]}`, false,
			`{"data":"aGk=","mimeType":"image/png","type":"image"}`, false, ""},
		{"embedded resource flattened", `{"content":[{"type":"resource","resource":{"uri":"file:///a","mimeType":"text/plain","text":"A","_meta":{}}}]}`, false,
			`{"mimeType":"text/plain","text":"A","type":"resource","uri":"file:///a"}`, false, ""},
		{"resource link", `{"content":[{"type":"resource_link","uri":"https://x/y","name":"y"}]}`, false,
			`{"name":"y","type":"resource_link","uri":"https://x/y"}`, false, ""},
		{"several contents", `{"content":[{"type":"text","text":"a"},{"type":"text","text":"[1]"},{"type":"audio","data":"AA==","mimeType":"audio/wav"}]}`, true,
			`["a",[1],{"data":"AA==","mimeType":"audio/wav","type":"audio"}]`, false, ""},
		{"isError", `{"content":[{"type":"text","text":"bad"},{"type":"image","data":"x","mimeType":"image/png"},{"type":"text","text":"worse"}],"isError":true}`, false,
			"", true, "bad\nworse"},
		{"isError without text", `{"content":[],"isError":true}`, false, "", true, "the tool reported an error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, isErr, msg, err := normalizeResult(json.RawMessage(tc.raw), tc.parseText)
			if err != nil {
				t.Fatal(err)
			}
			if isErr != tc.isErr || msg != tc.msg {
				t.Fatalf("isErr %v msg %q; want %v %q", isErr, msg, tc.isErr, tc.msg)
			}
			if !tc.isErr && string(got) != tc.want {
				t.Errorf("got %s; want %s", got, tc.want)
			}
			if !tc.isErr && !json.Valid(got) {
				t.Errorf("invalid JSON %s", got)
			}
		})
	}
	for _, bad := range []string{`[]`, `{"content":[{"type":"text"}]}`, `{"content":[{"type":"resource"}]}`, `{"content":[7]}`} {
		if _, _, _, err := normalizeResult(json.RawMessage(bad), false); err == nil {
			t.Errorf("normalizeResult(%s) accepted a malformed result", bad)
		}
	}
}

func TestCappedBody(t *testing.T) {
	cases := []struct {
		name     string
		body     string
		perEvent bool
		limit    int64
		tripped  bool
	}{
		{"json under", strings.Repeat("a", 100), false, 100, false},
		{"json over", strings.Repeat("a", 101), false, 100, true},
		{"events each under", strings.Repeat("data: "+strings.Repeat("a", 80)+"\n\n", 50), true, 100, false},
		{"crlf events each under", strings.Repeat("data: "+strings.Repeat("a", 80)+"\r\n\r\n", 50), true, 100, false},
		{"one event over", "data: x\n\ndata: " + strings.Repeat("a", 200) + "\n\n", true, 100, true},
		{"multi-line event over", "data: " + strings.Repeat("a", 60) + "\ndata: " + strings.Repeat("b", 60) + "\n\n", true, 100, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tw := &tripwire{}
			b := &cappedBody{rc: io.NopCloser(strings.NewReader(tc.body)), limit: tc.limit, perEvent: tc.perEvent, tw: tw}
			// Small reads, as from a network.
			var out bytes.Buffer
			buf := make([]byte, 7)
			var err error
			for {
				var n int
				n, err = b.Read(buf)
				out.Write(buf[:n])
				if err != nil {
					break
				}
			}
			if tc.tripped != errors.Is(err, errMessageTooLarge) || tc.tripped != tw.tripped.Load() {
				t.Fatalf("err %v, tripwire %v; want tripped=%v", err, tw.tripped.Load(), tc.tripped)
			}
			if !tc.tripped && out.String() != tc.body {
				t.Errorf("body altered")
			}
			if tc.tripped && int64(out.Len()) > tc.limit+int64(len(buf))+int64(len("data: x\n\n")) {
				t.Errorf("read %d bytes past a %d-byte cap", out.Len(), tc.limit)
			}
		})
	}
}

// TestMarshalString holds the plain-string shortcut to what the encoder
// writes, on the strings the shortcut must send to the encoder.
func TestMarshalString(t *testing.T) {
	for _, s := range []string{
		"", "one two three", "<b>&amp;</b>", "quote \" in", `back\slash`, "tab\there", "nl\n", "\x00", "\x1f", "\x7f",
		"héllo wörld", "line\u2028sep", "para\u2029sep", "bad \xff utf-8", "cut \xe2\x82", "emoji 😀", "é\"", "é\n",
	} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSuffix(b.String(), "\n")
		got, err := marshalString(s)
		if err != nil || string(got) != want {
			t.Errorf("marshalString(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
}
