package openapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/trace"
)

// maxDefs bounds the components one tool's schema may carry.
const maxDefs = 500

// maxDescription bounds a tool's description, in bytes: the catalog's
// copy is cut to it once masked (server.tools), never before.
const maxDescription = 4000

// maxOutputSchemaBytes bounds an output schema; a larger one is left out
// (the tool's results are then untyped), since it only types results.
const maxOutputSchemaBytes = argcheck.MaxSchemaBytes

// maxComponentHops bounds a chain of parameter, request body or response
// components that reference one another.
const maxComponentHops = 8

// Operation is one operation of a document, as a tool.
type Operation struct {
	// Tool is the operation's catalog entry; its Server is set by the
	// Set.
	Tool catalog.Tool
	// Method is the HTTP method, upper case; Path the path template.
	Method, Path string
	// Server overrides the document's base URL for this operation (a
	// path- or operation-level server, on the same host); nil when none.
	Server *url.URL
	params []param
	body   *body
	// accept is the Accept header: the success response's media types,
	// JSON first.
	accept string
}

// Location of a parameter.
const (
	inPath   = "path"
	inQuery  = "query"
	inHeader = "header"
	inCookie = "cookie"
)

// param is one parameter and where its value comes from in the arguments.
type param struct {
	name, in string
	// key is the argument's name: the parameter's own, unless two
	// locations share it (then "query_id", "header_id"...).
	key      string
	style    string
	explode  bool
	required bool
	// asJSON: the parameter is described by content application/json,
	// so its value goes out as JSON text.
	asJSON bool
}

// Body encodings.
const (
	bodyJSON      = "json"
	bodyForm      = "form"
	bodyMultipart = "multipart"
	bodyText      = "text"
)

// body is how the request body is made from its argument.
type body struct {
	key         string
	contentType string
	kind        string
	required    bool
}

// Drop is an operation left out of the tools, and why.
type Drop struct {
	Operation string `json:"operation"` // "GET /path"
	Reason    string `json:"reason"`
}

// converted is a document's operations as tools.
type converted struct {
	ops   []*Operation
	drops []Drop
}

// opRef is one operation of the document before it has a name.
type opRef struct {
	path, method string
	item         *openapi3.PathItem
	op           *openapi3.Operation
	name         string
}

// convertDocument turns every operation of doc into a tool, in path then
// method order; an operation that cannot be one (an external reference,
// a schema out of bounds) is dropped with the reason.
func convertDocument(doc *openapi3.T, conv *schemas, base *url.URL, baseFixed bool) (*converted, error) {
	out := &converted{}
	var refs []*opRef
	if doc.Paths != nil {
		paths := doc.Paths.Map()
		keys := make([]string, 0, len(paths))
		for k := range paths {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, p := range keys {
			item := paths[p]
			if item == nil {
				continue
			}
			for _, m := range httpMethods {
				op := item.GetOperation(strings.ToUpper(m))
				if op == nil {
					continue
				}
				if item.Ref != "" {
					out.drops = append(out.drops, Drop{strings.ToUpper(m) + " " + p, "path item $ref is not supported"})
					continue
				}
				refs = append(refs, &opRef{path: p, method: m, item: item, op: op})
			}
		}
	}
	if len(refs) > MaxOperations {
		return nil, fmt.Errorf("%w: %d, more than %d", ErrTooMany, len(refs), MaxOperations)
	}
	nameOperations(refs)
	total := 0
	for _, r := range refs {
		op, err := convertOperation(doc, conv, r, base, baseFixed)
		if errors.Is(err, ErrForeignServer) {
			return nil, err
		}
		if err != nil {
			out.drops = append(out.drops, Drop{strings.ToUpper(r.method) + " " + r.path, err.Error()})
			continue
		}
		if total += len(op.Tool.InputSchema) + len(op.Tool.OutputSchema); total > MaxSchemaBytes {
			return nil, fmt.Errorf("%w: the schemas of its operations add up to more than %d bytes", ErrTooLarge, MaxSchemaBytes)
		}
		out.ops = append(out.ops, op)
	}
	return out, nil
}

// nameOperations names every operation: its operationId when that is a
// valid tool name, else a name made of its method and path
// ("get_pets_petId"); a name taken already gets "_2", "_3"... Explicit
// operationIds are placed first, so a derived name never takes one.
func nameOperations(refs []*opRef) {
	taken := map[string]bool{}
	claim := func(r *opRef, want string) {
		name := want
		for i := 2; taken[name]; i++ {
			name = shorten(want, "_"+strconv.Itoa(i))
		}
		taken[name] = true
		r.name = name
	}
	for _, r := range refs {
		if id := r.op.OperationID; id != "" && catalog.ValidName(id) == nil {
			claim(r, id)
		}
	}
	for _, r := range refs {
		if r.name == "" {
			claim(r, derivedName(r.method, r.path))
		}
	}
}

// derivedName is a readable, stable name from method and path:
// "get /pets/{petId}/photos" is "get_pets_petId_photos".
func derivedName(method, path string) string {
	var b strings.Builder
	b.WriteString(method)
	under := true
	for _, c := range path {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			if under {
				b.WriteByte('_')
				under = false
			}
			b.WriteRune(c)
		default:
			under = true
		}
	}
	return shorten(b.String(), "")
}

// shorten appends suffix to name, cutting name (and marking the cut with a
// hash of it) so that the result stays within catalog.MaxNameLen.
func shorten(name, suffix string) string {
	if len(name)+len(suffix) <= catalog.MaxNameLen {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	h := "_" + hex.EncodeToString(sum[:4])
	return name[:catalog.MaxNameLen-len(h)-len(suffix)] + h + suffix
}

// convertOperation builds one operation's tool: its parameters and body
// as the input schema's properties, its success response's body as the
// output schema.
func convertOperation(doc *openapi3.T, conv *schemas, r *opRef, base *url.URL, baseFixed bool) (*Operation, error) {
	op := &Operation{Method: strings.ToUpper(r.method), Path: r.path}
	if !strings.HasPrefix(r.path, "/") {
		return nil, fmt.Errorf("path %q does not start with /", r.path)
	}
	if !baseFixed {
		srv, err := operationServer(r, base)
		if err != nil {
			return nil, err
		}
		op.Server = srv
	}
	t := newTree()
	args, err := op.arguments(doc, conv, r, t)
	if err != nil {
		return nil, err
	}
	defs, err := conv.defs(t, maxDefs)
	if err != nil {
		return nil, err
	}
	in, err := args.schema(defs)
	if err != nil {
		return nil, err
	}
	if err := argcheck.CheckBounds(in); err != nil {
		return nil, err
	}
	// Compiled now, so that a document whose schemas the validator cannot
	// use is told at configuration time rather than at the first call.
	if err := argcheck.Compile(in); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	out, accept, err := responseOf(doc, conv, r.op.Responses)
	if err != nil {
		return nil, err
	}
	op.accept = accept
	op.Tool = catalog.Tool{
		Name:         r.name,
		Title:        strings.TrimSpace(r.op.Summary),
		Description:  description(r.op),
		InputSchema:  in,
		OutputSchema: out,
		Annotations:  methodAnnotations(op.Method),
		Kind:         trace.KindMCP,
	}
	return op, nil
}

// argument is one property of a tool's input schema: a parameter or the
// request body.
type argument struct {
	key    string
	schema any
}

// arguments are a tool's input properties in the document's order (path,
// then query, header, cookie, body), which the declarations show, and
// those required.
type arguments struct {
	props    []argument
	required []string
}

func (a *arguments) add(key string, schema any, required bool) {
	a.props = append(a.props, argument{key, schema})
	if required {
		a.required = append(a.required, key)
	}
}

// arguments sets op's parameters and body from the document, and lists
// them as the tool's arguments; the schemas they reference are gathered
// in t.
func (op *Operation) arguments(doc *openapi3.T, conv *schemas, r *opRef, t *tree) (*arguments, error) {
	params, err := mergeParams(doc, r.item.Parameters, r.op.Parameters)
	if err != nil {
		return nil, err
	}
	keys := map[string]int{}
	for _, p := range params {
		keys[p.Name]++
	}
	args := &arguments{}
	for _, p := range params {
		pp, s, err := convertParam(conv, p, keys[p.Name] > 1, t)
		if err != nil {
			return nil, err
		}
		args.add(pp.key, describe(s, p.Description), pp.required)
		op.params = append(op.params, pp)
	}
	if err := op.addBody(doc, conv, r.op.RequestBody, keys, t, args); err != nil {
		return nil, err
	}
	for _, name := range templateNames(r.path) {
		if op.pathParam(name) == nil {
			return nil, fmt.Errorf("path parameter {%s} is not described", name)
		}
	}
	seen := map[string]bool{}
	for _, p := range args.props {
		if seen[p.key] {
			return nil, fmt.Errorf("two parameters are named %q", p.key)
		}
		seen[p.key] = true
	}
	return args, nil
}

// convertParam is how one parameter is sent and its schema; shared says
// another location has a parameter of its name, so that its argument is
// named after its location too ("query_id").
func convertParam(conv *schemas, p *openapi3.Parameter, shared bool, t *tree) (param, any, error) {
	sm, err := p.SerializationMethod()
	if err != nil {
		return param{}, nil, err
	}
	pp := param{name: p.Name, in: p.In, key: p.Name, style: sm.Style, explode: sm.Explode, required: p.Required || p.In == inPath}
	if shared {
		pp.key = p.In + "_" + p.Name
	}
	var s any
	switch {
	case p.Schema != nil:
		s, err = conv.convert(p.Schema, t)
	case len(p.Content) > 0:
		mt, media := pickMedia(p.Content)
		if media == nil || !isJSON(mt) {
			return param{}, nil, fmt.Errorf("parameter %s: content %s is not supported", p.Name, mt)
		}
		pp.asJSON = true
		s, err = conv.convert(media.Schema, t)
	default:
		s = map[string]any{}
	}
	if err != nil {
		return param{}, nil, fmt.Errorf("parameter %s: %w", p.Name, err)
	}
	return pp, s, nil
}

// addBody sets op's request body, if it has one, and adds it to args
// under "body", or "requestBody" when a parameter has that name (keys
// counts the parameters' names).
func (op *Operation) addBody(doc *openapi3.T, conv *schemas, ref *openapi3.RequestBodyRef, keys map[string]int, t *tree, args *arguments) error {
	rb, err := requestBody(doc, ref)
	if err != nil || rb == nil {
		return err
	}
	b, s, err := bodyOf(conv, rb, t)
	if err != nil {
		return err
	}
	b.key = "body"
	if keys["body"] > 0 {
		b.key = "requestBody"
	}
	if keys[b.key] > 0 {
		return errors.New(`parameters named "body" and "requestBody" leave no name for the request body`)
	}
	args.add(b.key, describe(s, rb.Description), b.required)
	op.body = b
	return nil
}

// schema writes the input schema by hand, so that its properties keep
// their order; defs are the components they reach.
func (a *arguments) schema(defs map[string]any) (json.RawMessage, error) {
	var in bytes.Buffer
	in.WriteString(`{"type":"object","properties":{`)
	for i, p := range a.props {
		if i > 0 {
			in.WriteByte(',')
		}
		k, _ := json.Marshal(p.key)
		v, err := json.Marshal(p.schema)
		if err != nil {
			return nil, err
		}
		in.Write(k)
		in.WriteByte(':')
		in.Write(v)
	}
	in.WriteString(`}`)
	if len(a.required) > 0 {
		rq, _ := json.Marshal(a.required)
		in.WriteString(`,"required":`)
		in.Write(rq)
	}
	// A misspelt argument is refused before the request goes out rather
	// than silently dropped.
	in.WriteString(`,"additionalProperties":false`)
	if len(defs) > 0 {
		d, err := json.Marshal(defs)
		if err != nil {
			return nil, err
		}
		in.WriteString(`,"$defs":`)
		in.Write(d)
	}
	in.WriteString(`}`)
	return in.Bytes(), nil
}

// templateNames lists the {names} of a path template.
func templateNames(path string) []string {
	var out []string
	for {
		i := strings.IndexByte(path, '{')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(path[i:], '}')
		if j < 0 {
			return append(out, path[i+1:])
		}
		out = append(out, path[i+1:i+j])
		path = path[i+j+1:]
	}
}

// description is an operation's summary and description.
func description(op *openapi3.Operation) string {
	s, d := strings.TrimSpace(op.Summary), strings.TrimSpace(op.Description)
	switch {
	case s == "" || strings.HasPrefix(d, s):
		return d
	case d == "":
		return s
	}
	return s + "\n\n" + d
}

// describe adds a description to a converted schema that has none.
func describe(s any, desc string) any {
	desc = strings.TrimSpace(desc)
	m, ok := s.(map[string]any)
	if !ok || desc == "" {
		return s
	}
	if _, has := m["description"]; !has {
		m["description"] = desc
	}
	return m
}

// methodAnnotations are the hints an operation's method gives: GET, HEAD,
// OPTIONS and TRACE read; POST, PUT, PATCH and DELETE change things and
// are destructive unless the configuration says otherwise (PUT and DELETE
// idempotently). The document itself cannot say otherwise: its author is
// not the one who decides what the sandbox may do.
func methodAnnotations(method string) catalog.Annotations {
	t, f := true, false
	open := &t
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return catalog.Annotations{ReadOnly: &t, Destructive: &f, Idempotent: &t, OpenWorld: open}
	case "PUT", "DELETE":
		return catalog.Annotations{ReadOnly: &f, Destructive: &t, Idempotent: &t, OpenWorld: open}
	}
	return catalog.Annotations{ReadOnly: &f, Destructive: &t, Idempotent: &f, OpenWorld: open}
}

// mergeParams is the path item's parameters overridden by the
// operation's (by location and name), references resolved.
func mergeParams(doc *openapi3.T, item, op openapi3.Parameters) ([]*openapi3.Parameter, error) {
	var out []*openapi3.Parameter
	index := map[[2]string]int{}
	for _, list := range []openapi3.Parameters{item, op} {
		for _, r := range list {
			p, err := resolveParam(doc, r)
			if err != nil {
				return nil, err
			}
			switch p.In {
			case inPath, inQuery, inHeader, inCookie:
			default:
				return nil, fmt.Errorf("parameter %s: unknown location %q", p.Name, p.In)
			}
			if p.Name == "" {
				return nil, errors.New("a parameter has no name")
			}
			if p.In == inHeader && ignoredHeader(p.Name) {
				// OpenAPI: these are described elsewhere, and ignored here.
				continue
			}
			k := [2]string{p.In, p.Name}
			if i, ok := index[k]; ok {
				out[i] = p
				continue
			}
			index[k] = len(out)
			out = append(out, p)
		}
	}
	// Path, query, header, cookie: the order a reader expects.
	order := map[string]int{inPath: 0, inQuery: 1, inHeader: 2, inCookie: 3}
	sort.SliceStable(out, func(i, j int) bool { return order[out[i].In] < order[out[j].In] })
	return out, nil
}

// ignoredHeader reports a header parameter left out of the tool: the
// three OpenAPI says to ignore, and those an argument must not set
// because HTTP itself, the credentials or the trace context own them.
func ignoredHeader(name string) bool {
	switch n := strings.ToLower(name); n {
	case "accept", "content-type", "authorization",
		"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
		"expect", "cookie", "proxy-authorization", "proxy-connection", "traceparent", "tracestate":
		return true
	default:
		return strings.HasPrefix(n, "x-amz-")
	}
}

// componentName returns the name a "#/components/<kind>/NAME" reference
// names.
func componentRef(ref, kind string) (string, error) {
	name, ok := strings.CutPrefix(ref, "#/components/"+kind+"/")
	if !ok || !componentName.MatchString(name) {
		return "", fmt.Errorf("%w %q: only references to #/components/%s are followed", errRef, ref, kind)
	}
	return name, nil
}

func resolveParam(doc *openapi3.T, r *openapi3.ParameterRef) (*openapi3.Parameter, error) {
	for range maxComponentHops {
		if r == nil {
			return nil, errors.New("empty parameter")
		}
		if r.Ref == "" {
			if r.Value == nil {
				return nil, errors.New("empty parameter")
			}
			return r.Value, nil
		}
		name, err := componentRef(r.Ref, "parameters")
		if err != nil {
			return nil, err
		}
		if doc.Components == nil || doc.Components.Parameters[name] == nil {
			return nil, fmt.Errorf("%w %q: no such component", errRef, r.Ref)
		}
		r = doc.Components.Parameters[name]
	}
	return nil, fmt.Errorf("parameter references chain more than %d components", maxComponentHops)
}

func requestBody(doc *openapi3.T, r *openapi3.RequestBodyRef) (*openapi3.RequestBody, error) {
	for range maxComponentHops {
		if r == nil {
			return nil, nil
		}
		if r.Ref == "" {
			return r.Value, nil
		}
		name, err := componentRef(r.Ref, "requestBodies")
		if err != nil {
			return nil, err
		}
		if doc.Components == nil || doc.Components.RequestBodies[name] == nil {
			return nil, fmt.Errorf("%w %q: no such component", errRef, r.Ref)
		}
		r = doc.Components.RequestBodies[name]
	}
	return nil, fmt.Errorf("request body references chain more than %d components", maxComponentHops)
}

func response(doc *openapi3.T, r *openapi3.ResponseRef) (*openapi3.Response, error) {
	for range maxComponentHops {
		if r == nil {
			return nil, nil
		}
		if r.Ref == "" {
			return r.Value, nil
		}
		name, err := componentRef(r.Ref, "responses")
		if err != nil {
			return nil, err
		}
		if doc.Components == nil || doc.Components.Responses[name] == nil {
			return nil, fmt.Errorf("%w %q: no such component", errRef, r.Ref)
		}
		r = doc.Components.Responses[name]
	}
	return nil, fmt.Errorf("response references chain more than %d components", maxComponentHops)
}

// mediaType parses a media type, lower case, without parameters.
func mediaType(mt string) string {
	base, _, err := mime.ParseMediaType(mt)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(mt))
	}
	return base
}

// isJSON reports whether mt is JSON: application/json or a +json type.
func isJSON(mt string) bool {
	base := mediaType(mt)
	return base == "application/json" || strings.HasSuffix(base, "+json")
}

// pickMedia chooses the media type a request body or parameter is sent
// as: JSON first, then forms, text, anything else; "" when there is none.
func pickMedia(content openapi3.Content) (string, *openapi3.MediaType) {
	types := make([]string, 0, len(content))
	for k := range content {
		types = append(types, k)
	}
	sort.Slice(types, func(i, j int) bool {
		if ri, rj := mediaRank(types[i]), mediaRank(types[j]); ri != rj {
			return ri < rj
		}
		return types[i] < types[j]
	})
	if len(types) == 0 {
		return "", nil
	}
	return types[0], content[types[0]]
}

func mediaRank(mt string) int {
	base := mediaType(mt)
	switch {
	case base == "application/json":
		return 0
	case isJSON(base):
		return 1
	case base == "application/x-www-form-urlencoded":
		return 2
	case base == "multipart/form-data":
		return 3
	case strings.HasPrefix(base, "text/"):
		return 4
	case base == "*/*" || base == "application/*":
		return 5
	}
	return 6
}

// bodyOf says how the request body is sent and its schema.
func bodyOf(conv *schemas, rb *openapi3.RequestBody, t *tree) (*body, any, error) {
	mt, media := pickMedia(rb.Content)
	if media == nil {
		return nil, nil, errors.New("the request body has no media type")
	}
	b := &body{contentType: mt, required: rb.Required}
	base := mediaType(mt)
	switch {
	case isJSON(base):
		b.kind = bodyJSON
	case base == "*/*" || base == "application/*":
		b.kind, b.contentType = bodyJSON, "application/json"
	case base == "application/x-www-form-urlencoded":
		b.kind = bodyForm
	case base == "multipart/form-data":
		b.kind = bodyMultipart
	case strings.HasPrefix(base, "text/"):
		b.kind = bodyText
		return b, map[string]any{"type": "string"}, nil
	default:
		return nil, nil, fmt.Errorf("request body media type %s is not supported", mt)
	}
	s, err := conv.convert(media.Schema, t)
	if err != nil {
		return nil, nil, fmt.Errorf("request body: %w", err)
	}
	return b, s, nil
}

// successCode picks the response a successful call gets: the lowest 2xx
// code, else 2XX; "" when the operation documents none.
func successCode(rs *openapi3.Responses) string {
	if rs == nil {
		return ""
	}
	best, ranged := "", ""
	for code := range rs.Map() {
		switch {
		case strings.EqualFold(code, "2XX"):
			ranged = code
		case len(code) == 3 && code[0] == '2' && code[1] >= '0' && code[1] <= '9' && code[2] >= '0' && code[2] <= '9':
			if best == "" || code < best {
				best = code
			}
		}
	}
	if best == "" {
		return ranged
	}
	return best
}

// responseOf is the output schema (the success response's body) and the
// Accept header of an operation.
func responseOf(doc *openapi3.T, conv *schemas, rs *openapi3.Responses) (json.RawMessage, string, error) {
	code := successCode(rs)
	if code == "" {
		return nil, "application/json", nil
	}
	resp, err := response(doc, rs.Map()[code])
	if err != nil || resp == nil {
		// Only typing is lost: the call still works.
		return nil, "application/json", nil
	}
	if len(resp.Content) == 0 {
		return json.RawMessage(`{"type":"null"}`), "application/json", nil
	}
	types := make([]string, 0, len(resp.Content))
	for k := range resp.Content {
		types = append(types, k)
	}
	sort.Slice(types, func(i, j int) bool {
		if ri, rj := mediaRank(types[i]), mediaRank(types[j]); ri != rj {
			return ri < rj
		}
		return types[i] < types[j]
	})
	accept := make([]string, len(types))
	for i, mt := range types {
		accept[i] = mediaType(mt)
		if i > 0 {
			accept[i] += ";q=0." + strconv.Itoa(max(1, 9-i))
		}
	}
	mt := types[0]
	var schema any
	switch base := mediaType(mt); {
	case isJSON(base):
		t := newTree()
		s, err := conv.convert(resp.Content[mt].Schema, t)
		if err != nil {
			return nil, strings.Join(accept, ", "), nil
		}
		defs, err := conv.defs(t, maxDefs)
		if err != nil {
			return nil, strings.Join(accept, ", "), nil
		}
		if m, ok := s.(map[string]any); ok && len(defs) > 0 {
			m["$defs"] = defs
		} else if len(defs) > 0 {
			s = map[string]any{"allOf": []any{s}, "$defs": defs}
		}
		schema = s
	case strings.HasPrefix(base, "text/") || strings.HasSuffix(base, "xml"):
		schema = map[string]any{"type": "string"}
	default:
		schema = binarySchema
	}
	raw, err := json.Marshal(schema)
	if err != nil || argcheck.CheckBounds(raw) != nil || len(raw) > maxOutputSchemaBytes {
		return nil, strings.Join(accept, ", "), nil
	}
	return raw, strings.Join(accept, ", "), nil
}

// binarySchema types a body that is neither JSON nor text.
var binarySchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"content_type": map[string]any{"type": "string"},
		"base64":       map[string]any{"type": "string", "contentEncoding": "base64"},
	},
	"required": []any{"content_type", "base64"},
}
