package openapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

const docHead = `{"openapi":"3.0.3","info":{"title":"t","version":"1"},`

// okOp is a valid operation, for documents that must keep one.
const okOp = `"/ok":{"get":{"responses":{"200":{"description":"ok"}}}}`

// nestedCycle is a ring of n component schemas, each reaching the next
// through depth levels of nesting: the shape whose reference resolution
// cost kin-openapi's loader 21 s and 580 MB at 4000×50.
func nestedCycle(n, depth int) string {
	var b strings.Builder
	b.WriteString(docHead + `"paths":{"/a":{"post":{"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/S0"}}}},"responses":{"200":{"description":"ok"}}}}},"components":{"schemas":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		inner := fmt.Sprintf(`{"$ref":"#/components/schemas/S%d"}`, (i+1)%n)
		for range depth {
			inner = `{"type":"object","properties":{"a":` + inner + `}}`
		}
		fmt.Fprintf(&b, `"S%d":%s`, i, inner)
	}
	b.WriteString(`}}}`)
	return b.String()
}

func manyOperations(n int) string {
	var b strings.Builder
	b.WriteString(docHead + `"paths":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"/p%d":{"get":{}}`, i)
	}
	b.WriteString(`}}`)
	return b.String()
}

func nested(depth int) string {
	s := `{"type":"string"}`
	for range depth {
		s = `{"type":"object","properties":{"a":` + s + `}}`
	}
	return docHead + `"paths":{"/a":{"post":{"requestBody":{"content":{"application/json":{"schema":` + s + `}}},"responses":{"200":{"description":"ok"}}}}}}`
}

func wideBody(props int, withOK bool) string {
	var b strings.Builder
	b.WriteString(docHead + `"paths":{"/big":{"post":{"requestBody":{"content":{"application/json":{"schema":{"type":"object","properties":{`)
	for i := range props {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"field_number_%d":{"type":"string","description":"a field of a very wide body"}`, i)
	}
	b.WriteString(`}}}}},"responses":{"200":{"description":"ok"}}}}`)
	if withOK {
		b.WriteString("," + okOp)
	}
	b.WriteString(`}}`)
	return b.String()
}

const aliasBomb = `openapi: 3.0.3
info: {title: t, version: "1"}
a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
paths: {}
`

// TestHostileDocuments: every document below is refused with an error
// that says why, or loses only the operations it spoils, and Parse
// returns (the test process staying up is the rest of the verdict).
func TestHostileDocuments(t *testing.T) {
	fromURL := &url.URL{Scheme: "https", Host: "api.test", Path: "/openapi.json"}
	fileURL := &url.URL{Scheme: "file", Path: "/etc/pml/openapi.json"}
	tests := []struct {
		name   string
		doc    string
		docURL *url.URL
		base   string
		want   error  // errors.Is; nil with wantIn
		wantIn string // in the error's text
		// keeps, when the document loads, is the tools it must keep;
		// dropped the reason its other operations were left out for.
		keeps   []string
		dropped string
	}{
		{name: "deep reference cycle", doc: nestedCycle(4000, 50), want: ErrNoOperations, wantIn: "more than 500 components"},
		{name: "nesting past the bound", doc: nested(70), want: ErrTooDeep},
		{name: "a million operations", doc: manyOperations(1_000_000), want: ErrTooLarge},
		{name: "a hundred thousand operations", doc: manyOperations(100_000), want: ErrTooMany},
		{name: "server on another host", docURL: fromURL, want: ErrForeignServer,
			doc: docHead + `"servers":[{"url":"http://169.254.169.254/latest"}],"paths":{` + okOp + `}}`},
		{name: "server by variable on another host", docURL: fromURL, want: ErrForeignServer,
			doc: docHead + `"servers":[{"url":"https://{h}/","variables":{"h":{"default":"evil.test"}}}],"paths":{` + okOp + `}}`},
		{name: "operation server on another host", docURL: fromURL, want: ErrForeignServer,
			doc: docHead + `"paths":{"/x":{"get":{"servers":[{"url":"https://evil.test"}],"responses":{"200":{"description":"ok"}}}}}}`},
		{name: "another host the operator chose", docURL: fromURL, base: "https://api2.test/v1", keeps: []string{"get_ok"},
			doc: docHead + `"servers":[{"url":"https://elsewhere.test"}],"paths":{` + okOp + `}}`},
		{name: "server with credentials", docURL: fileURL, wantIn: "may not hold credentials",
			doc: docHead + `"servers":[{"url":"https://user:pw@api.test"}],"paths":{` + okOp + `}}`},
		{name: "server not http", docURL: fileURL, wantIn: "want an http or https URL",
			doc: docHead + `"servers":[{"url":"file:///etc/passwd"}],"paths":{` + okOp + `}}`},
		{name: "huge input schema, with a good operation", doc: wideBody(2000, true), keeps: []string{"get_ok"}, dropped: "input schema is too large"},
		{name: "huge input schema alone", doc: wideBody(2000, false), want: ErrNoOperations, wantIn: "input schema is too large"},
		{name: "YAML alias bomb", doc: aliasBomb, wantIn: "YAML"},
		{name: "external reference", want: ErrNoOperations, wantIn: "only references to #/components/schemas",
			doc: docHead + `"paths":{"/x":{"post":{"requestBody":{"content":{"application/json":{"schema":{"$ref":"file:///etc/passwd"}}}},"responses":{"200":{"description":"ok"}}}}}}`},
		{name: "reference into the document elsewhere", keeps: []string{"get_ok"}, dropped: "only references to #/components/schemas",
			doc: docHead + `"paths":{` + okOp + `,"/x":{"post":{"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/paths/~1ok"}}}},"responses":{"200":{"description":"ok"}}}}}}`},
		{name: "parameter reference elsewhere", keeps: []string{"get_ok"}, dropped: "only references to #/components/parameters",
			doc: docHead + `"paths":{` + okOp + `,"/x":{"get":{"parameters":[{"$ref":"https://evil.test/p.json"}],"responses":{"200":{"description":"ok"}}}}}}`},
		{name: "references in a ring", keeps: []string{"get_ok"}, dropped: "A → B → A",
			doc: docHead + `"paths":{` + okOp + `,"/x":{"post":{"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/A"}}}},"responses":{"200":{"description":"ok"}}}}},
			"components":{"schemas":{"A":{"$ref":"#/components/schemas/B"},"B":{"allOf":[{"$ref":"#/components/schemas/A"}]}}}}`},
		{name: "a recursive schema that reaches values", keeps: []string{"post_x"},
			doc: docHead + `"paths":{"/x":{"post":{"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/A"}}}},"responses":{"200":{"description":"ok"}}}}},
			"components":{"schemas":{"A":{"$ref":"#/components/schemas/B"},"B":{"type":"object","properties":{"next":{"$ref":"#/components/schemas/A"}}}}}}`},
		{name: "Swagger 2.0", doc: `{"swagger":"2.0","info":{"title":"t","version":"1"},"paths":{}}`, want: ErrNotOpenAPI3},
		{name: "OpenAPI 4", doc: `{"openapi":"4.0.0","info":{"title":"t","version":"1"},"paths":{}}`, want: ErrNotOpenAPI3},
		{name: "not a document", doc: `[1,2,3]`, wantIn: "not an object"},
		{name: "no operations", doc: docHead + `"paths":{}}`, want: ErrNoOperations},
		{name: "reserved names only", keeps: []string{"get_x"},
			doc: docHead + `"paths":{"/x":{"get":{"operationId":"__proto__","responses":{"200":{"description":"ok"}}}}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.base
			if base == "" && tc.docURL == nil {
				base = "http://api.test"
			}
			d, err := Parse([]byte(tc.doc), tc.docURL, base)
			if tc.keeps != nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				var names []string
				for _, op := range d.Operations {
					names = append(names, op.Tool.Name)
				}
				if fmt.Sprint(names) != fmt.Sprint(tc.keeps) {
					t.Errorf("tools %v, want %v", names, tc.keeps)
				}
				if tc.dropped != "" && (len(d.Drops) != 1 || !strings.Contains(d.Drops[0].Reason, tc.dropped)) {
					t.Errorf("drops %v, want one for %q", d.Drops, tc.dropped)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %v %q", tc.want, tc.wantIn)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("error %q does not say %q", err, tc.wantIn)
			}
			if len(err.Error()) > 1000 {
				t.Errorf("error of %d bytes: %.200s…", len(err.Error()), err)
			}
		})
	}
}

// TestFetchBounded: a document URL that stalls, streams without end, or
// redirects to another host is refused, and fetching returns.
func TestFetchBounded(t *testing.T) {
	release := make(chan struct{})
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"openapi":`))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("/forever", func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat(" ", 64<<10))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		// The same server under another name: another host as far as
		// the request is concerned.
		http.Redirect(w, r, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)+"/doc", http.StatusFound)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/doc", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/doc", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(docHead + `"paths":{` + okOp + `}}`))
	})
	mux.HandleFunc("/missing", http.NotFound)
	srv = httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)

	ctx := context.Background()
	// Each case but the stall gets a budget it cannot reach, so that what
	// ends it is the bound it tests, not a loaded machine's slowness
	// (streaming the size bound took over 500 ms under the race detector).
	tests := []struct {
		path, wantIn string
		want         error
		budget       time.Duration
	}{
		{path: "/stall", wantIn: "no complete answer within", budget: 500 * time.Millisecond},
		{path: "/forever", want: ErrTooLarge},
		{path: "/away", wantIn: "redirect to another host not followed"},
		{path: "/missing", wantIn: "HTTP 404"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			budget := tc.budget
			if budget == 0 {
				budget = time.Minute
			}
			_, _, err := Fetch(ctx, srv.Client(), srv.URL+tc.path, budget)
			if err == nil {
				t.Fatal("fetched")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("error %q does not say %q", err, tc.wantIn)
			}
		})
	}
	data, loc, err := Fetch(ctx, srv.Client(), srv.URL+"/moved", 10*time.Second)
	if err != nil {
		t.Fatalf("same-host redirect: %v", err)
	}
	if loc.Path != "/doc" || len(data) == 0 {
		t.Errorf("location %v", loc)
	}
}
