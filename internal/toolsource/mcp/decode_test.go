package mcp

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// resultDocs are tools/call results on which decodeResult must read what
// encoding/json reads, errors included.
var resultDocs = []string{
	`{"content":[{"type":"text","text":"{\"chars\":13,\"lines\":1,\"words\":3}"}],"structuredContent":{"chars":13,"lines":1,"words":3}}`,
	`{"content":[],"isError":true}`,
	`{"Content":[{"type":"text","text":"a"}],"ISERROR":true,"structuredcontent":null}`,
	`{"content":[1],"content":[2,3]}`,
	`{"content":[{"type":"text","text":"\xff\xfe"}],"resultType":7}`,
	`{"content":null,"structuredContent":"x","resultType":"input_required"}`,
	`{"content":{"type":"text"}}`,
	`{"isError":"yes"}`,
	`{"content":[1,]}`,
	`[]`,
	`null`,
	`{}`,
	` {"content" : [ {"type":"text","text":"a"} ] , "_meta":{"x":[{}]}} `,
}

func TestDecodeResultReadsAsEncodingJSON(t *testing.T) {
	for _, doc := range resultDocs {
		agreeWithV1(t, []byte(doc))
	}
}

// FuzzDecodeResult holds decodeResult to encoding/json on any text.
func FuzzDecodeResult(f *testing.F) {
	for _, doc := range resultDocs {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) { agreeWithV1(t, doc) })
}

func agreeWithV1(t *testing.T, doc []byte) {
	t.Helper()
	var want wireResult
	werr := json.Unmarshal(doc, &want)
	got, gerr := decodeResult(doc)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: encoding/json says %v, decodeResult %v", doc, werr, gerr)
	}
	if werr == nil && !reflect.DeepEqual(normal(got), normal(want)) {
		t.Fatalf("%q: decodeResult read %+v, encoding/json %+v", doc, got, want)
	}
}

// normal compacts raw values, whose whitespace the two decoders may keep
// differently, and makes empty ones nil.
func normal(r wireResult) wireResult {
	c := func(m json.RawMessage) json.RawMessage {
		if len(m) == 0 {
			return nil
		}
		var b bytes.Buffer
		if err := json.Compact(&b, m); err != nil {
			return m
		}
		return b.Bytes()
	}
	out := wireResult{IsError: r.IsError, StructuredContent: c(r.StructuredContent), ResultType: c(r.ResultType)}
	if r.Content != nil {
		out.Content = []json.RawMessage{}
	}
	for _, m := range r.Content {
		out.Content = append(out.Content, c(m))
	}
	return out
}
