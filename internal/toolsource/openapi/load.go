package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"
)

// Bounds on a document, checked before its model is built so that no
// document can make loading slow or large. Real documents sit far inside
// them: GitHub's REST API description (about 1,100 operations, 11 MB of
// JSON) is the largest in common use.
const (
	// MaxDocumentBytes bounds a document as fetched and as JSON.
	MaxDocumentBytes = 16 << 20
	// MaxDocumentDepth bounds how deeply objects and arrays nest in it.
	MaxDocumentDepth = 128
	// MaxOperations bounds the operations (tools) of one document.
	MaxOperations = 2000
	// MaxSchemaBytes bounds the schemas of all its tools together, as
	// they are kept in memory for the life of the process.
	MaxSchemaBytes = 32 << 20
	// DefaultFetchTimeout bounds fetching a document by URL, body
	// included.
	DefaultFetchTimeout = 30 * time.Second
	// maxRedirects bounds the same-host redirects followed.
	maxRedirects = 5
)

// Errors a refused document wraps, for errors.Is.
var (
	ErrTooLarge      = errors.New("OpenAPI document is too large")
	ErrTooDeep       = errors.New("OpenAPI document nests too deeply")
	ErrTooMany       = errors.New("OpenAPI document has too many operations")
	ErrNotOpenAPI3   = errors.New("not an OpenAPI 3.0 or 3.1 document")
	ErrForeignServer = errors.New("OpenAPI server is on another host")
	ErrNoOperations  = errors.New("OpenAPI document offers no tool")
)

// errCrossHostRedirect stops the HTTP client at a redirect to another
// host: the response is handed back as it is.
var errCrossHostRedirect = errors.New("redirect to another host not followed")

// sameHostRedirects is a CheckRedirect that follows a few redirects on the
// original request's scheme and host, and no other: a document, or a
// service, must not send the host's requests (and their credentials)
// anywhere else.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || !strings.EqualFold(req.URL.Host, first.Host) {
		return http.ErrUseLastResponse
	}
	return nil
}

// Fetch reads the document at spec, a URL (http or https) or a file path,
// within MaxDocumentBytes and, for a URL, timeout (DefaultFetchTimeout
// when 0), following redirects only on the same host. It returns the
// bytes and the document's location (its final URL, or a file: URL),
// against which relative server URLs resolve.
func Fetch(ctx context.Context, hc *http.Client, spec string, timeout time.Duration) ([]byte, *url.URL, error) {
	if isURL(spec) {
		return fetchURL(ctx, hc, spec, timeout)
	}
	f, err := os.Open(spec)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	hint := 0
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		// Read into one buffer of the file's size, not one grown by
		// doubling (twice the memory and a copy per step for GitHub's
		// 13 MB document); readBounded still stops past the bound.
		hint = int(min(fi.Size(), MaxDocumentBytes)) + bytes.MinRead
	}
	data, err := readBounded(f, hint)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec, err)
	}
	return data, fileURL(spec), nil
}

// fileURL is the location of a document read from the file at path.
func fileURL(path string) *url.URL { return &url.URL{Scheme: "file", Path: path} }

func isURL(spec string) bool {
	return strings.HasPrefix(spec, "http://") || strings.HasPrefix(spec, "https://")
}

func fetchURL(ctx context.Context, hc *http.Client, spec string, timeout time.Duration) ([]byte, *url.URL, error) {
	if timeout <= 0 {
		timeout = DefaultFetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.5")
	c := *hc
	c.CheckRedirect = sameHostRedirects
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("fetching the document: no complete answer within %s", timeout)
		}
		return nil, nil, fmt.Errorf("fetching the document: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, nil, fmt.Errorf("fetching the document: HTTP %d: %w (%s)", resp.StatusCode, errCrossHostRedirect, resp.Header.Get("Location"))
	case resp.StatusCode != http.StatusOK:
		return nil, nil, fmt.Errorf("fetching the document: HTTP %d", resp.StatusCode)
	}
	data, err := readBounded(resp.Body, 0)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("fetching the document: no complete answer within %s", timeout)
		}
		return nil, nil, fmt.Errorf("fetching the document: %w", err)
	}
	return data, resp.Request.URL, nil
}

// readBounded reads r to its end, refusing more than MaxDocumentBytes
// without reading further; hint, when not 0, is the size to expect.
func readBounded(r io.Reader, hint int) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(hint)
	if _, err := buf.ReadFrom(io.LimitReader(r, MaxDocumentBytes+1)); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxDocumentBytes)
	}
	return data, nil
}

// toJSON returns the document as JSON: as it is when it is JSON, else
// read as YAML (yaml.v3 refuses alias expansion out of proportion to the
// document). Either way it is then within MaxDocumentBytes and
// MaxDocumentDepth.
func toJSON(data []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("the document is empty")
	}
	if trimmed[0] != '{' {
		var v any
		if err := yaml.Unmarshal(trimmed, &v); err != nil {
			return nil, fmt.Errorf("the document is neither JSON nor YAML: %w", err)
		}
		var err error
		if trimmed, err = json.Marshal(jsonCompatible(v)); err != nil {
			return nil, fmt.Errorf("the YAML document has no JSON form: %w", err)
		}
		if len(trimmed) > MaxDocumentBytes {
			return nil, fmt.Errorf("%w: more than %d bytes as JSON", ErrTooLarge, MaxDocumentBytes)
		}
	}
	if err := checkDepth(trimmed); err != nil {
		return nil, err
	}
	if !json.Valid(trimmed) {
		return nil, errors.New("the document is not valid JSON")
	}
	return trimmed, nil
}

// jsonCompatible turns YAML's map[any]any (non-string keys) into what
// encoding/json takes, keys formatted as strings; yaml.v3 already gives
// map[string]any for the usual documents.
func jsonCompatible(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonCompatible(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonCompatible(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonCompatible(e)
		}
		return x
	}
	return v
}

// checkDepth reports whether JSON data nests objects and arrays deeper
// than MaxDocumentDepth, in one pass that stops there.
func checkDepth(data []byte) error {
	depth := 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > MaxDocumentDepth {
				return fmt.Errorf("%w: objects and arrays nest more than %d levels deep", ErrTooDeep, MaxDocumentDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// httpMethods are the operations of a path item, in the order tools are
// numbered when names collide.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// countOperations counts the operations under "paths" by streaming
// through the JSON, so that a document of a million tiny operations is
// refused before a million are built.
func countOperations(data []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return 0, err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return 0, err
		}
		if key != "paths" {
			if err := skipValue(dec); err != nil {
				return 0, err
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return 0, errors.New(`"paths" is not an object`)
		}
		n := 0
		for dec.More() {
			if _, err := dec.Token(); err != nil { // the path
				return 0, err
			}
			if t, err := dec.Token(); err != nil || t != json.Delim('{') {
				return 0, errors.New("a path item is not an object")
			}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return 0, err
				}
				if s, ok := k.(string); ok && isMethod(s) {
					if n++; n > MaxOperations {
						return n, fmt.Errorf("%w: more than %d", ErrTooMany, MaxOperations)
					}
				}
				if err := skipValue(dec); err != nil {
					return 0, err
				}
			}
			if _, err := dec.Token(); err != nil { // }
				return 0, err
			}
		}
		return n, nil
	}
	return 0, nil
}

func isMethod(s string) bool {
	for _, m := range httpMethods {
		if s == m {
			return true
		}
	}
	return false
}

// skipValue reads one value, however nested, without keeping it.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// parseDocument checks data against the bounds and builds its model:
// the document's skeleton read by kin-openapi, and its schemas (see
// extractSchemas).
func parseDocument(data []byte) (*openapi3.T, *schemas, error) {
	if len(data) > MaxDocumentBytes {
		return nil, nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxDocumentBytes)
	}
	js, err := toJSON(data)
	if err != nil {
		return nil, nil, err
	}
	var tree map[string]any
	if err := json.Unmarshal(js, &tree); err != nil {
		return nil, nil, fmt.Errorf("the document is not an object: %w", err)
	}
	version, _ := tree["openapi"].(string)
	if sw, ok := tree["swagger"]; ok {
		return nil, nil, fmt.Errorf("%w: it is Swagger %v (convert it to OpenAPI 3 first)", ErrNotOpenAPI3, sw)
	}
	if !strings.HasPrefix(version, "3.0.") && !strings.HasPrefix(version, "3.1.") && version != "3.0" && version != "3.1" {
		return nil, nil, fmt.Errorf("%w: openapi is %q", ErrNotOpenAPI3, version)
	}
	if _, err := countOperations(js); err != nil {
		return nil, nil, err
	}
	conv := extractSchemas(tree, strings.HasPrefix(version, "3.0"))
	skeleton, err := json.Marshal(tree)
	if err != nil {
		return nil, nil, err
	}
	var doc openapi3.T
	if err := json.Unmarshal(skeleton, &doc); err != nil {
		return nil, nil, fmt.Errorf("reading the OpenAPI document: %w", err)
	}
	return &doc, conv, nil
}

// Document is an OpenAPI document read as tools.
type Document struct {
	// Title and Version are the document's info.
	Title, Version string
	// Base is the URL requests go to (an operation's own server aside).
	Base *url.URL
	// Operations are the tools, in path then method order.
	Operations []*Operation
	// Drops are the operations left out, and why.
	Drops []Drop
}

// Parse reads data, a document found at docURL (nil when it came from
// neither a URL nor a file), as tools whose requests go to baseURL, or,
// when that is "", to the document's first server. A document out of
// the bounds, not OpenAPI 3.0 or 3.1, or whose servers are on another
// host than the document is refused; an operation that cannot be a tool
// is left out (Document.Drops says why).
func Parse(data []byte, docURL *url.URL, baseURL string) (*Document, error) {
	doc, conv, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	base, fixed, err := documentBase(doc, docURL, baseURL)
	if err != nil {
		return nil, err
	}
	c, err := convertDocument(doc, conv, base, fixed)
	if err != nil {
		return nil, err
	}
	switch {
	case len(c.ops) == 0 && len(c.drops) > 0:
		return nil, fmt.Errorf("%w: none of its %d operations can be a tool (%s: %s)", ErrNoOperations,
			len(c.drops), c.drops[0].Operation, c.drops[0].Reason)
	case len(c.ops) == 0:
		return nil, fmt.Errorf("%w: it has no paths", ErrNoOperations)
	}
	d := &Document{Base: base, Operations: c.ops, Drops: c.drops}
	if doc.Info != nil {
		d.Title, d.Version = doc.Info.Title, doc.Info.Version
	}
	return d, nil
}
