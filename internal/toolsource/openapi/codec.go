package openapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/trace"
)

// The cache entry's body is a Document in a small binary form of its own:
// every string and schema is a uvarint length and its bytes, every list a
// uvarint count. It is written only by encodeDocument and read only by
// decodeDocument, which takes it as untrusted: every length is checked
// against what is left before anything is allocated, every count against
// the document bounds, so that no entry can make decoding large or slow;
// the schemas are views into the entry's bytes, not copies. What decides
// what a call may do is not read from the entry at all but derived again
// (annotations and the tool's kind from the method), and the hosts it
// names are checked again (checkDecoded).
//
// encoding/gob and encoding/json were the alternatives: gob is documented
// as unsafe on hostile input, and JSON scans every schema byte to decode
// it (tens of milliseconds for GitHub's document, the budget of a whole
// start).

// maxParams bounds the parameters of one decoded operation; no real
// operation comes near it.
const maxParams = 1000

// encoder appends the binary form.
type encoder struct{ b []byte }

func (e *encoder) uint(n int)      { e.b = binary.AppendUvarint(e.b, uint64(n)) }
func (e *encoder) bytes(p []byte)  { e.uint(len(p)); e.b = append(e.b, p...) }
func (e *encoder) string(s string) { e.uint(len(s)); e.b = append(e.b, s...) }
func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func urlString(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.String()
}

// encodeDocument appends d's binary form to dst.
func encodeDocument(dst []byte, d *Document) []byte {
	e := &encoder{b: dst}
	e.string(d.Title)
	e.string(d.Version)
	e.string(urlString(d.Base))
	e.uint(len(d.Operations))
	for _, op := range d.Operations {
		e.string(op.Tool.Name)
		e.string(op.Tool.Title)
		e.string(op.Tool.Description)
		e.bytes(op.Tool.InputSchema)
		e.bytes(op.Tool.OutputSchema)
		e.string(op.Method)
		e.string(op.Path)
		e.string(urlString(op.Server))
		e.string(op.accept)
		e.uint(len(op.params))
		for _, p := range op.params {
			e.string(p.name)
			e.string(p.in)
			e.string(p.key)
			e.string(p.style)
			e.bool(p.explode)
			e.bool(p.required)
			e.bool(p.asJSON)
		}
		e.bool(op.body != nil)
		if op.body != nil {
			e.string(op.body.key)
			e.string(op.body.contentType)
			e.string(op.body.kind)
			e.bool(op.body.required)
		}
	}
	e.uint(len(d.Drops))
	for _, dr := range d.Drops {
		e.string(dr.Operation)
		e.string(dr.Reason)
	}
	return e.b
}

// errBadEntry is what a cache entry that cannot be read wraps.
var errBadEntry = errors.New("cache entry")

// decoder reads the binary form; the first error sticks, and every read
// after it returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errBadEntry}, a...)...)
	}
}

// uint reads a uvarint no greater than limit.
func (d *decoder) uint(limit int) int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated")
		return 0
	}
	if v > uint64(limit) {
		d.fail("a count or length of %d is over its bound %d", v, limit)
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

// bytes is a view of the next length-prefixed bytes, its capacity cut so
// that appending to it can never write over what follows; nil when empty.
func (d *decoder) bytes() []byte {
	n := d.uint(maxEntryBytes)
	if d.err != nil || n == 0 {
		return nil
	}
	if n > len(d.b) {
		d.fail("a length of %d is past the end", n)
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) bool() bool {
	switch n := d.uint(1); {
	case d.err != nil:
		return false
	default:
		return n == 1
	}
}

// url reads a URL, nil for "".
func (d *decoder) url() *url.URL {
	s := d.string()
	if s == "" || d.err != nil {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		d.fail("URL: %v", err)
		return nil
	}
	return u
}

// decodeDocument reads a Document from data, which must hold exactly one.
func decodeDocument(data []byte) (*Document, error) {
	d := &decoder{b: data}
	doc := &Document{Title: d.string(), Version: d.string(), Base: d.url()}
	n := d.uint(MaxOperations)
	doc.Operations = make([]*Operation, 0, min(n, len(data)))
	total := 0
	for range n {
		op := decodeOperation(d)
		if d.err != nil {
			return nil, d.err
		}
		if total += len(op.Tool.InputSchema) + len(op.Tool.OutputSchema); total > MaxSchemaBytes {
			return nil, fmt.Errorf("%w: its schemas add up to more than %d bytes", errBadEntry, MaxSchemaBytes)
		}
		doc.Operations = append(doc.Operations, op)
	}
	drops := d.uint(MaxOperations)
	for range drops {
		doc.Drops = append(doc.Drops, Drop{Operation: d.string(), Reason: d.string()})
		if d.err != nil {
			return nil, d.err
		}
	}
	switch {
	case d.err != nil:
		return nil, d.err
	case len(d.b) != 0:
		return nil, fmt.Errorf("%w: %d bytes after its end", errBadEntry, len(d.b))
	case len(doc.Operations) == 0:
		return nil, fmt.Errorf("%w: no operation", errBadEntry)
	}
	return doc, nil
}

// decodeOperation reads one operation. Its annotations and kind are not
// in the entry: they follow from the method, as convertOperation sets
// them.
func decodeOperation(d *decoder) *Operation {
	op := &Operation{}
	op.Tool.Name, op.Tool.Title, op.Tool.Description = d.string(), d.string(), d.string()
	op.Tool.InputSchema, op.Tool.OutputSchema = d.bytes(), d.bytes()
	op.Method, op.Path, op.Server, op.accept = d.string(), d.string(), d.url(), d.string()
	np := d.uint(maxParams)
	for range np {
		p := param{name: d.string(), in: d.string(), key: d.string(), style: d.string()}
		p.explode, p.required, p.asJSON = d.bool(), d.bool(), d.bool()
		if d.err != nil {
			return op
		}
		op.params = append(op.params, p)
	}
	if d.bool() {
		op.body = &body{key: d.string(), contentType: d.string(), kind: d.string(), required: d.bool()}
	}
	op.Tool.Annotations = methodAnnotations(op.Method)
	op.Tool.Kind = trace.KindMCP
	return op
}

// checkDecoded holds a decoded document to what Parse would have made of
// the document at docURL with base URL configured: requests go to the
// configured base or a server on the document's host, each operation's
// own server on the base's host, and every method, location and encoding
// is one the request builder knows. It is what a cache entry cannot be
// trusted to say.
func checkDecoded(doc *Document, docURL *url.URL, configured string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errBadEntry}, a...)...)
	}
	if doc.Base == nil {
		return bad("no base URL")
	}
	fixed := configured != ""
	if fixed {
		want, err := url.Parse(configured)
		if err != nil || want.String() != doc.Base.String() {
			return bad("base URL %s is not the configured one", doc.Base.Redacted())
		}
	} else if err := errors.Join(checkBase(doc.Base), sameHost(doc.Base, docURL)); err != nil {
		return bad("%v", err)
	}
	for _, op := range doc.Operations {
		if err := checkDecodedOperation(op, doc.Base, fixed); err != nil {
			return bad("operation %s: %v", op.Tool.Name, err)
		}
	}
	return nil
}

func checkDecodedOperation(op *Operation, base *url.URL, fixed bool) error {
	if !isMethod(strings.ToLower(op.Method)) || op.Method != strings.ToUpper(op.Method) {
		return fmt.Errorf("method %q", op.Method)
	}
	if !strings.HasPrefix(op.Path, "/") {
		return fmt.Errorf("path %q", op.Path)
	}
	if err := catalog.ValidName(op.Tool.Name); err != nil {
		return err
	}
	if s := op.Server; s != nil {
		if fixed || checkBase(s) != nil || !strings.EqualFold(s.Host, base.Host) || s.Scheme != base.Scheme {
			return fmt.Errorf("server %s", s.Redacted())
		}
	}
	for _, p := range op.params {
		switch {
		case p.in != inPath && p.in != inQuery && p.in != inHeader && p.in != inCookie:
			return fmt.Errorf("parameter location %q", p.in)
		case p.name == "" || p.key == "":
			return errors.New("a parameter has no name")
		case p.in == inHeader && ignoredHeader(p.name):
			return fmt.Errorf("header parameter %s", p.name)
		}
	}
	for _, name := range templateNames(op.Path) {
		if op.pathParam(name) == nil {
			return fmt.Errorf("path parameter {%s} is not described", name)
		}
	}
	if b := op.body; b != nil {
		switch b.kind {
		case bodyJSON, bodyForm, bodyMultipart, bodyText:
		default:
			return fmt.Errorf("body kind %q", b.kind)
		}
		if b.key == "" || strings.ContainsAny(b.contentType, "\r\n") {
			return errors.New("body")
		}
	}
	return nil
}
