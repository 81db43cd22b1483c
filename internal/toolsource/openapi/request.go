package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/fault"
)

// badArg is the INVALID_ARGUMENTS of a value the schema let through but
// HTTP cannot carry (a line break in a header, an object where a path
// segment goes).
func badArg(key, format string, a ...any) *fault.Error {
	msg := fmt.Sprintf(format, a...)
	return &fault.Error{Code: fault.InvalidArguments, Message: key + ": " + msg,
		Details: []argcheck.Error{{Path: "/" + key, Message: msg}}}
}

// newRequest builds the HTTP request of one call: args are the checked
// arguments (a JSON object), base the URL the operation's path goes
// under.
func (op *Operation) newRequest(ctx context.Context, base *url.URL, args json.RawMessage) (*http.Request, error) {
	var values map[string]json.RawMessage
	if err := json.Unmarshal(args, &values); err != nil {
		return nil, badArg("", "arguments are not a JSON object")
	}
	if op.Server != nil {
		base = op.Server
	}
	path, err := op.expandPath(values)
	if err != nil {
		return nil, err
	}
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + path.plain
	u.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + path.escaped
	query := url.Values{}
	header := http.Header{}
	var cookies []string
	for _, p := range op.params {
		raw, ok := values[p.key]
		if !ok || p.in == inPath {
			continue
		}
		v, err := decodeValue(raw)
		if err != nil || v == nil {
			continue
		}
		switch p.in {
		case inQuery:
			if err := p.addQuery(query, v, raw); err != nil {
				return nil, err
			}
		case inHeader:
			s, err := p.simple(v, raw)
			if err != nil {
				return nil, err
			}
			if strings.ContainsAny(s, "\r\n\x00") {
				return nil, badArg(p.key, "a header value may not hold a line break")
			}
			header.Set(p.name, s)
		case inCookie:
			s, err := p.simple(v, raw)
			if err != nil {
				return nil, err
			}
			cookies = append(cookies, p.name+"="+url.QueryEscape(s))
		}
	}
	u.RawQuery = query.Encode()
	var body io.Reader
	var contentType string
	if b := op.body; b != nil {
		if raw, ok := values[b.key]; ok {
			data, ct, err := b.encode(raw)
			if err != nil {
				return nil, err
			}
			body, contentType = bytes.NewReader(data), ct
		}
	}
	req, err := http.NewRequestWithContext(ctx, op.Method, u.String(), body)
	if err != nil {
		return nil, err
	}
	// Defence in depth: nothing above can change the host, and nothing
	// may.
	if req.URL.Host != base.Host || req.URL.Scheme != base.Scheme {
		return nil, fault.New(fault.Forbidden, "the request would leave %s", base.Host)
	}
	req.Header = header
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if len(cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(cookies, "; "))
	}
	req.Header.Set("Accept", op.accept)
	return req, nil
}

// decodeValue decodes one argument, numbers kept exact.
func decodeValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

type expanded struct{ plain, escaped string }

// expandPath fills the path template. Each value is escaped whole, "/"
// included, and a value of "." or ".." is escaped too, so that no
// argument can climb out of its segment ("/orders/../admin").
func (op *Operation) expandPath(values map[string]json.RawMessage) (expanded, error) {
	var plain, esc strings.Builder
	rest := op.Path
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			plain.WriteString(rest)
			esc.WriteString(rest)
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return expanded{}, fault.New(fault.ToolError, "path template %q is not closed", op.Path)
		}
		plain.WriteString(rest[:i])
		esc.WriteString(rest[:i])
		name := rest[i+1 : i+j]
		rest = rest[i+j+1:]
		p := op.pathParam(name)
		if p == nil {
			return expanded{}, fault.New(fault.ToolError, "path template %q: {%s} is not a parameter", op.Path, name)
		}
		raw, ok := values[p.key]
		if !ok {
			return expanded{}, badArg(p.key, "the path parameter is required")
		}
		v, err := decodeValue(raw)
		if err != nil || v == nil {
			return expanded{}, badArg(p.key, "the path parameter may not be null")
		}
		s, err := p.pathValue(v, raw)
		if err != nil {
			return expanded{}, err
		}
		if s == "" {
			return expanded{}, badArg(p.key, "the path parameter may not be empty")
		}
		plain.WriteString(s)
		e := url.PathEscape(s)
		if s == "." || s == ".." {
			e = strings.ReplaceAll(s, ".", "%2E")
		}
		esc.WriteString(e)
	}
	return expanded{plain.String(), esc.String()}, nil
}

func (op *Operation) pathParam(name string) *param {
	for i := range op.params {
		if op.params[i].in == inPath && op.params[i].name == name {
			return &op.params[i]
		}
	}
	return nil
}

// scalar is a primitive's text: strings as they are, numbers and booleans
// as JSON writes them.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// pairs lists an object's members in key order as text, for the
// serialisation styles that flatten objects.
func pairs(m map[string]any) ([][2]string, bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][2]string, 0, len(keys))
	for _, k := range keys {
		s, ok := scalar(m[k])
		if !ok {
			return nil, false
		}
		out = append(out, [2]string{k, s})
	}
	return out, true
}

func items(a []any) ([]string, bool) {
	out := make([]string, len(a))
	for i, e := range a {
		s, ok := scalar(e)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

// simple serialises a header or cookie value (style simple, or form for
// cookies, which read the same for one value).
func (p *param) simple(v any, raw json.RawMessage) (string, error) {
	if p.asJSON {
		return string(raw), nil
	}
	if s, ok := scalar(v); ok {
		return s, nil
	}
	switch x := v.(type) {
	case []any:
		if list, ok := items(x); ok {
			return strings.Join(list, ","), nil
		}
	case map[string]any:
		if ps, ok := pairs(x); ok {
			var parts []string
			for _, kv := range ps {
				if p.explode {
					parts = append(parts, kv[0]+"="+kv[1])
				} else {
					parts = append(parts, kv[0], kv[1])
				}
			}
			return strings.Join(parts, ","), nil
		}
	}
	return "", badArg(p.key, "a value nested this deeply cannot be sent in a %s", p.in)
}

// pathValue serialises a path parameter: style simple (the default),
// label (".v") or matrix (";name=v").
func (p *param) pathValue(v any, raw json.RawMessage) (string, error) {
	s, err := p.simple(v, raw)
	if err != nil {
		return "", err
	}
	switch p.style {
	case "label":
		return "." + s, nil
	case "matrix":
		return ";" + p.name + "=" + s, nil
	}
	return s, nil
}

// addQuery adds a query parameter in its style: form (exploded arrays
// repeat the name, exploded objects become their members), the
// delimited styles, or deepObject (name[member]=v).
func (p *param) addQuery(q url.Values, v any, raw json.RawMessage) error {
	if p.asJSON {
		q.Add(p.name, string(raw))
		return nil
	}
	if s, ok := scalar(v); ok {
		q.Add(p.name, s)
		return nil
	}
	switch x := v.(type) {
	case []any:
		list, ok := items(x)
		if !ok {
			break
		}
		switch {
		case p.style == "spaceDelimited":
			q.Add(p.name, strings.Join(list, " "))
		case p.style == "pipeDelimited":
			q.Add(p.name, strings.Join(list, "|"))
		case p.explode:
			for _, s := range list {
				q.Add(p.name, s)
			}
		default:
			q.Add(p.name, strings.Join(list, ","))
		}
		return nil
	case map[string]any:
		ps, ok := pairs(x)
		if !ok {
			break
		}
		switch {
		case p.style == "deepObject":
			for _, kv := range ps {
				q.Add(p.name+"["+kv[0]+"]", kv[1])
			}
		case p.explode:
			for _, kv := range ps {
				q.Add(kv[0], kv[1])
			}
		default:
			var parts []string
			for _, kv := range ps {
				parts = append(parts, kv[0], kv[1])
			}
			q.Add(p.name, strings.Join(parts, ","))
		}
		return nil
	}
	return badArg(p.key, "a value nested this deeply cannot be sent in the query")
}

// encode makes the request body from its argument.
func (b *body) encode(raw json.RawMessage) ([]byte, string, error) {
	switch b.kind {
	case bodyJSON:
		return raw, b.contentType, nil
	case bodyText:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, "", badArg(b.key, "a %s body is a string", b.contentType)
		}
		return []byte(s), b.contentType, nil
	}
	v, err := decodeValue(raw)
	if err != nil {
		return nil, "", err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, "", badArg(b.key, "a %s body is an object", b.contentType)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	field := func(v any) (string, error) {
		if s, ok := scalar(v); ok {
			return s, nil
		}
		// Nested values go as JSON text, as OpenAPI's default encoding
		// for object-valued form fields says.
		j, err := json.Marshal(v)
		return string(j), err
	}
	if b.kind == bodyForm {
		form := url.Values{}
		for _, k := range keys {
			if list, ok := m[k].([]any); ok {
				if ss, ok := items(list); ok {
					form[k] = ss
					continue
				}
			}
			s, err := field(m[k])
			if err != nil {
				return nil, "", err
			}
			form.Set(k, s)
		}
		return []byte(form.Encode()), b.contentType, nil
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, k := range keys {
		s, err := field(m[k])
		if err != nil {
			return nil, "", err
		}
		if err := w.WriteField(k, s); err != nil {
			return nil, "", err
		}
	}
	if err := w.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), w.FormDataContentType(), nil
}

// errNotFollowed marks a redirect response the client did not follow.
var errNotFollowed = errors.New("redirect not followed")
