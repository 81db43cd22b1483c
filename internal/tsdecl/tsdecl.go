// Package tsdecl writes what a script sees of its tools as JavaScript and
// TypeScript source: the declarations of the `mcp` object (and the `args`
// and `tools` globals) generated from the tools' JSON Schemas, and the call
// expression that reaches one tool. It reads schemas with its own small JSON
// reader because encoding/json forgets the order of object members, and the
// declarations list properties in the order the schema's author chose.
package tsdecl

import (
	"bytes"
	"cmp"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/catalog"
)

// Limits that keep Declarations bounded on hostile schemas. Past a limit the
// generator writes `unknown` (or elides), which is always a correct, if
// vaguer, type.
const (
	// maxDepth is the deepest schema nesting rendered.
	maxDepth = 12
	// nodeBudget is the number of schema nodes rendered per tool; it
	// stops $ref fan-out (each definition used twice by the one above it)
	// from growing the output exponentially.
	nodeBudget = 4000
	// maxEnum is the longest enum rendered as a union of literals.
	maxEnum = 64
	// maxProps is the most properties rendered per object.
	maxProps = 200
	// maxDoc is the longest description kept in a JSDoc comment, in
	// characters.
	maxDoc = 2000
)

const indent = "  "

// Declarations returns TypeScript declarations of the `mcp` object the
// given tools make, and of the `args` and `tools` globals, so an agent can
// write correct calls first time. Servers and tools are sorted by name;
// each tool becomes a method whose parameter type comes from its input
// schema and whose Promise type comes from its output schema (unknown when
// it has none). Names that are not identifiers are quoted ("get-sum").
func Declarations(tools []catalog.Tool) string {
	sorted := slices.Clone(tools)
	slices.SortStableFunc(sorted, func(a, b catalog.Tool) int {
		return cmp.Or(cmp.Compare(a.Server, b.Server), cmp.Compare(a.Name, b.Name))
	})
	sorted = slices.CompactFunc(sorted, func(a, b catalog.Tool) bool { return a.Server == b.Server && a.Name == b.Name })

	var b strings.Builder
	b.WriteString("// The tools of this execution. Call them as `await mcp.<server>.<tool>(args)`;\n")
	b.WriteString("// a name that is not an identifier is reached with brackets: mcp.server[\"get-sum\"](args).\n")
	if len(sorted) == 0 {
		b.WriteString("declare const mcp: {};\n")
	} else {
		b.WriteString("declare const mcp: {\n")
		for i := 0; i < len(sorted); {
			server := sorted[i].Server
			b.WriteString(indent + propertyKey(server) + ": {\n")
			for ; i < len(sorted) && sorted[i].Server == server; i++ {
				writeMethod(&b, sorted[i], indent+indent)
			}
			b.WriteString(indent + "};\n")
		}
		b.WriteString("};\n")
	}
	b.WriteString(helperDeclarations)
	return b.String()
}

// Signature is one tool's declaration: its JSDoc and its method
// signature as it appears inside `mcp.<server>` (Declarations' own), so
// that a search hit carries the types of the call it names without the
// whole catalog's declarations.
func Signature(t catalog.Tool) string {
	var b strings.Builder
	writeMethod(&b, t, "")
	return b.String()
}

// OfServers narrows tools to those of the named servers (all of them when
// servers is empty): the declarations of one server of a large catalog
// rather than every server's.
func OfServers(tools []catalog.Tool, servers []string) []catalog.Tool {
	if len(servers) == 0 {
		return tools
	}
	out := make([]catalog.Tool, 0, len(tools))
	for _, t := range tools {
		if slices.Contains(servers, t.Server) {
			out = append(out, t)
		}
	}
	return out
}

// helperDeclarations describe the globals the prelude defines besides mcp;
// the executor's tools.* built-ins answer them.
const helperDeclarations = `/** The JSON value passed as this execution's arguments (null when none). */
declare const args: unknown;
/** One tool as tools.search and tools.list describe it. */
interface ToolSummary {
  server: string;
  name: string;
  /** How to call it from this script: mcp.server.name(args), or mcp.server["odd-name"](args). */
  call: string;
  title?: string;
  description?: string;
  /** What serves it: an MCP server, a saved capability, or the host. */
  kind: "mcp" | "capability" | "builtin";
  /** The JSON Schema of its arguments. */
  input_schema?: unknown;
}
/** Discovery of the tools above from inside the script. */
declare const tools: {
  /** Rank the visible tools by how well their names and descriptions match the query (lexical, best first). */
  search(query: string, limit?: number): Promise<Array<ToolSummary & { score: number }>>;
  /** List the visible tools. */
  list(): Promise<ToolSummary[]>;
  /** These declarations, as TypeScript source. */
  describe(): Promise<string>;
};
/** Console output is captured with its level and returned with the result. */
interface Console {
  log(...data: unknown[]): void;
  info(...data: unknown[]): void;
  warn(...data: unknown[]): void;
  error(...data: unknown[]): void;
  debug(...data: unknown[]): void;
}
// var and function declarations merge with lib.dom's and @types/node's,
// so these compile beside either.
declare var console: Console;
declare function setTimeout(callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]): number;
declare function clearTimeout(handle?: number): void;
`

// writeMethod writes one tool as a method signature.
func writeMethod(b *strings.Builder, t catalog.Tool, ind string) {
	doc := t.Description
	if t.Title != "" && t.Title != t.Description {
		doc = strings.TrimSpace(t.Title + "\n\n" + t.Description)
	}
	if tags := toolTags(t); tags != "" {
		doc = strings.TrimSpace(doc + "\n\n" + tags)
	}
	writeDoc(b, ind, doc, nil)

	g := &generator{budget: nodeBudget}
	param, optional := "Record<string, unknown>", true
	if in := g.load(t.InputSchema); in != nil {
		param = g.typeOf(in, 0, ind)
		optional = !hasRequired(g, in)
	}
	result := "unknown"
	out := &generator{budget: nodeBudget}
	if o := out.load(t.OutputSchema); o != nil {
		result = out.typeOf(o, 0, ind)
	}
	name := propertyKey(t.Name)
	if name == "new" {
		// `new(…)` in a type literal is a construct signature, not a method.
		name = quote(name)
	}
	q := ""
	if optional {
		q = "?"
	}
	b.WriteString(ind + name + "(args" + q + ": " + param + "): Promise<" + result + ">;\n")
}

// toolTags are the JSDoc lines that say what a call does besides its
// description: the request or function it reaches, and whether it needs a
// person's approval — so that an agent tells a read from a delete before
// it asks, and writes the calls a person must approve where that person
// can read them.
func toolTags(t catalog.Tool) string {
	var lines []string
	if e := t.Endpoint.String(); e != "" {
		lines = append(lines, "@endpoint "+e)
	}
	switch {
	case t.IsDestructive() && t.DestructiveByDefault():
		lines = append(lines, `@destructive (it does not say otherwise: MCP's defaults) runs only with allow_destructive or a person's approval (approval "suspend")`)
	case t.IsDestructive():
		lines = append(lines, `@destructive runs only with allow_destructive or a person's approval (approval "suspend")`)
	case t.RequireApproval:
		lines = append(lines, `@approval its server asks a person to approve every call: runs only with allow_destructive or a person's approval (approval "suspend")`)
	}
	return strings.Join(lines, "\n")
}

// hasRequired reports whether an input schema requires any property, which
// decides whether the args parameter may be left out.
func hasRequired(g *generator, s *jvalue) bool {
	s = g.deref(s)
	if r := s.get("required"); r != nil && r.kind == jArray && len(r.items) > 0 {
		return true
	}
	if all := s.get("allOf"); all != nil && all.kind == jArray {
		for _, sub := range all.items {
			if r := g.deref(sub).get("required"); r != nil && r.kind == jArray && len(r.items) > 0 {
				return true
			}
		}
	}
	return false
}

// generator renders one schema document. It is used for one tool's input
// or output schema and then dropped.
type generator struct {
	root   *jvalue
	budget int
	refs   []string // the $ref chain being expanded, for cycle detection
}

// load parses raw as the root schema; nil when there is none or it is not
// JSON (the caller then falls back to a loose type).
func (g *generator) load(raw []byte) *jvalue {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	v, err := parseJSON(raw)
	if err != nil || v.kind == jNull {
		return nil
	}
	g.root = v
	return v
}

// deref follows local $refs (without cycle checks or budget: it is only
// used to peek at `required`, bounded by a few hops).
func (g *generator) deref(s *jvalue) *jvalue {
	for range 8 {
		ref := s.getString("$ref")
		if ref == "" {
			return s
		}
		t := g.resolve(ref)
		if t == nil {
			return s
		}
		s = t
	}
	return s
}

// resolve finds a local reference ("#", "#/$defs/x", "#/definitions/x", any
// JSON pointer into the root); nil for anything else.
func (g *generator) resolve(ref string) *jvalue {
	if ref == "#" {
		return g.root
	}
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	cur := g.root
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = unescapePointer(tok)
		switch {
		case cur == nil:
			return nil
		case cur.kind == jObject:
			cur = cur.get(tok)
		case cur.kind == jArray:
			i, ok := atoi(tok)
			if !ok || i >= len(cur.items) {
				return nil
			}
			cur = cur.items[i]
		default:
			return nil
		}
	}
	return cur
}

// unescapePointer decodes a JSON pointer token, including the percent
// encoding of URI fragments.
func unescapePointer(s string) string {
	if strings.Contains(s, "%") {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
				b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
				i += 2
				continue
			}
			b.WriteByte(s[i])
		}
		s = b.String()
	}
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(s)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

func atoi(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

// typeOf renders schema s as a TypeScript type. ind is the indentation of
// the line the type starts on; nested object members go one level deeper.
func (g *generator) typeOf(s *jvalue, depth int, ind string) string {
	g.budget--
	if g.budget < 0 || depth > maxDepth || s == nil {
		return "unknown"
	}
	switch s.kind {
	case jBool:
		if s.b {
			return "unknown"
		}
		return "never"
	case jObject:
	default:
		return "unknown"
	}

	if ref := s.getString("$ref"); ref != "" {
		if slices.Contains(g.refs, ref) {
			return "unknown" // a recursive type; TS could name it, inline cannot
		}
		target := g.resolve(ref)
		if target == nil {
			return "unknown"
		}
		g.refs = append(g.refs, ref)
		t := g.typeOf(target, depth+1, ind)
		g.refs = g.refs[:len(g.refs)-1]
		return nullable(s, t)
	}
	if c := s.get("const"); c != nil {
		return nullable(s, literal(c))
	}
	if e := s.get("enum"); e != nil && e.kind == jArray {
		return nullable(s, g.enumType(e))
	}

	var parts []string // intersected
	if base := g.baseType(s, depth, ind); base != "" {
		parts = append(parts, base)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alt := s.get(k); alt != nil && alt.kind == jArray && len(alt.items) > 0 {
			members := make([]string, 0, len(alt.items))
			for _, sub := range alt.items {
				members = append(members, g.typeOf(sub, depth+1, ind))
			}
			parts = append(parts, union(members))
		}
	}
	if all := s.get("allOf"); all != nil && all.kind == jArray {
		for _, sub := range all.items {
			parts = append(parts, g.typeOf(sub, depth+1, ind))
		}
	}
	return nullable(s, intersection(parts))
}

// baseType renders the `type` keyword (or what the keywords present imply),
// or "" when the schema does not constrain the type.
func (g *generator) baseType(s *jvalue, depth int, ind string) string {
	var types []string
	switch t := s.get("type"); {
	case t != nil && t.kind == jString:
		types = []string{t.str}
	case t != nil && t.kind == jArray:
		for _, it := range t.items {
			if it.kind == jString {
				types = append(types, it.str)
			}
		}
	case s.get("properties") != nil || s.get("additionalProperties") != nil || s.get("patternProperties") != nil:
		types = []string{"object"}
	case s.get("items") != nil || s.get("prefixItems") != nil:
		types = []string{"array"}
	default:
		return ""
	}
	members := make([]string, 0, len(types))
	for _, t := range types {
		switch t {
		case "string":
			members = append(members, "string")
		case "number", "integer":
			members = append(members, "number")
		case "boolean":
			members = append(members, "boolean")
		case "null":
			members = append(members, "null")
		case "object":
			members = append(members, g.objectType(s, depth, ind))
		case "array":
			members = append(members, g.arrayType(s, depth, ind))
		default:
			members = append(members, "unknown")
		}
	}
	return union(members)
}

func (g *generator) objectType(s *jvalue, depth int, ind string) string {
	props := s.get("properties")
	extra := s.get("additionalProperties")
	if pp := s.get("patternProperties"); extra == nil && pp != nil && pp.kind == jObject && len(pp.keys) > 0 {
		extra = &jvalue{kind: jBool, b: true}
	}
	if props == nil || props.kind != jObject || len(props.keys) == 0 {
		switch {
		case extra != nil && extra.kind == jBool && !extra.b:
			return "Record<string, never>"
		case extra != nil && extra.kind == jObject:
			return "Record<string, " + g.typeOf(extra, depth+1, ind) + ">"
		default:
			return "Record<string, unknown>"
		}
	}
	required := map[string]bool{}
	if r := s.get("required"); r != nil && r.kind == jArray {
		for _, it := range r.items {
			if it.kind == jString {
				required[it.str] = true
			}
		}
	}
	inner := ind + indent
	var b strings.Builder
	b.WriteString("{\n")
	for i, k := range props.keys {
		if i == maxProps {
			b.WriteString(inner + "// … " + strconv.Itoa(len(props.keys)-maxProps) + " more properties\n")
			b.WriteString(inner + "[key: string]: unknown;\n")
			extra = nil
			break
		}
		p := props.vals[i]
		writeDoc(&b, inner, propDoc(p), p)
		q := "?"
		if required[k] {
			q = ""
		}
		b.WriteString(inner + propertyKey(k) + q + ": " + g.typeOf(p, depth+1, inner) + ";\n")
	}
	if extra != nil && !(extra.kind == jBool && !extra.b) {
		// Explicitly open: an index signature must admit every declared
		// property's type too, so unknown is the only safe one.
		b.WriteString(inner + "[key: string]: unknown;\n")
	}
	b.WriteString(ind + "}")
	return b.String()
}

func (g *generator) arrayType(s *jvalue, depth int, ind string) string {
	prefix := s.get("prefixItems")
	items := s.get("items")
	rest := items
	if items != nil && items.kind == jArray { // draft 4–7 tuple form
		prefix, rest = items, s.get("additionalItems")
	}
	if prefix != nil && prefix.kind == jArray {
		elems := make([]string, 0, len(prefix.items)+1)
		for _, it := range prefix.items {
			elems = append(elems, g.typeOf(it, depth+1, ind))
		}
		switch {
		case rest == nil || rest.kind == jBool && rest.b:
			elems = append(elems, "...unknown[]")
		case rest.kind == jObject:
			elems = append(elems, "..."+arrayOf(g.typeOf(rest, depth+1, ind)))
		}
		return "[" + strings.Join(elems, ", ") + "]"
	}
	if items == nil {
		return "unknown[]"
	}
	return arrayOf(g.typeOf(items, depth+1, ind))
}

// arrayOf writes T[] for simple element types and Array<T> for the rest,
// where T[] would bind wrongly (unions) or read badly (object literals).
func arrayOf(t string) string {
	if identifier.MatchString(t) {
		return t + "[]"
	}
	return "Array<" + t + ">"
}

func (g *generator) enumType(e *jvalue) string {
	if len(e.items) == 0 {
		return "never"
	}
	if len(e.items) > maxEnum {
		// Too many literals to be useful: the union of their JSON types.
		kinds := make([]string, 0, 4)
		for _, it := range e.items {
			kinds = append(kinds, kindType(it))
		}
		return union(kinds)
	}
	lits := make([]string, 0, len(e.items))
	for _, it := range e.items {
		lits = append(lits, literal(it))
	}
	return union(lits)
}

// literal renders a JSON value as a literal type; objects and arrays have
// none simple enough, so they give their kind.
func literal(v *jvalue) string {
	switch v.kind {
	case jString:
		return quote(v.str)
	case jNumber, jBool, jNull:
		var b bytes.Buffer
		v.encode(&b)
		return b.String()
	default:
		return kindType(v)
	}
}

func kindType(v *jvalue) string {
	switch v.kind {
	case jString:
		return "string"
	case jNumber:
		return "number"
	case jBool:
		return "boolean"
	case jNull:
		return "null"
	case jArray:
		return "unknown[]"
	default:
		return "Record<string, unknown>"
	}
}

// nullable adds null for OpenAPI's `nullable: true`.
func nullable(s *jvalue, t string) string {
	if s.isTrue("nullable") {
		return union([]string{t, "null"})
	}
	return t
}

// union joins distinct members with |; unknown absorbs everything.
func union(members []string) string {
	var out []string
	for _, m := range members {
		if m == "unknown" {
			return "unknown"
		}
		if m == "never" || slices.Contains(out, m) {
			continue
		}
		out = append(out, m)
	}
	switch len(out) {
	case 0:
		return "never"
	case 1:
		return out[0]
	}
	return strings.Join(out, " | ")
}

// intersection joins parts with &; unknown is the identity.
func intersection(parts []string) string {
	var out []string
	for _, p := range parts {
		if p != "unknown" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	switch len(out) {
	case 0:
		return "unknown"
	case 1:
		return out[0]
	}
	for i, p := range out {
		if strings.Contains(p, " | ") {
			out[i] = "(" + p + ")" // & binds tighter than |
		}
	}
	return strings.Join(out, " & ")
}

var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// propertyKey writes a name as an identifier when it is one, else quoted.
func propertyKey(name string) string {
	if identifier.MatchString(name) {
		return name
	}
	return quote(name)
}

// propDoc is the documentation of a property: its description (or title).
func propDoc(p *jvalue) string {
	if d := p.getString("description"); d != "" {
		return d
	}
	return p.getString("title")
}

// writeDoc writes a JSDoc comment. For properties (p non-nil) it adds the
// default, the format and deprecation, which help a caller pick values.
func writeDoc(b *strings.Builder, ind, doc string, p *jvalue) {
	doc = strings.TrimSpace(doc)
	if utf8.RuneCountInString(doc) > maxDoc {
		doc = string([]rune(doc)[:maxDoc]) + "…"
	}
	var lines []string
	if doc != "" {
		lines = strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n", "\u2028", "\n", "\u2029", "\n").Replace(doc), "\n")
	}
	if p != nil {
		if f := p.getString("format"); f != "" {
			lines = append(lines, "@format "+f)
		}
		if d := p.get("default"); d != nil {
			var buf bytes.Buffer
			d.encode(&buf)
			s := buf.String()
			if utf8.RuneCountInString(s) > 80 {
				s = string([]rune(s)[:80]) + "…"
			}
			lines = append(lines, "@default "+s)
		}
		if p.isTrue("deprecated") {
			lines = append(lines, "@deprecated")
		}
	}
	if len(lines) == 0 {
		return
	}
	for i, l := range lines {
		// "*/" would end the comment early and let a schema inject code.
		lines[i] = strings.ReplaceAll(strings.TrimRight(l, " \t"), "*/", "*\\/")
	}
	if len(lines) == 1 {
		b.WriteString(ind + "/** " + lines[0] + " */\n")
		return
	}
	b.WriteString(ind + "/**\n")
	for _, l := range lines {
		if l == "" {
			b.WriteString(ind + " *\n")
		} else {
			b.WriteString(ind + " * " + l + "\n")
		}
	}
	b.WriteString(ind + " */\n")
}
