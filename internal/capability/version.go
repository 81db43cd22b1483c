package capability

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/pml-sandbox/pml/internal/fault"
)

// CodeHash is "sha256:" and the hex SHA-256 of code, as a version records
// it (Capability.CodeHash).
func CodeHash(code string) string {
	sum := sha256.Sum256([]byte(code))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// The code is normalised as the body it is, wrapped as the guest wraps it
// (top-level await and return are legal), and esbuild prints the wrapper
// back as normHead … normTail.
const (
	wrapHead = "(async function (args) {"
	wrapTail = "\n})"
	normHead = "(async function(args){"
	normTail = "});\n"
)

// Normalize returns code with its whitespace and comments normalised
// away: the JavaScript esbuild parses it into, printed back with
// whitespace minified and no comments (not even legal ones), names and
// everything else untouched. Two codes with the same normal form are the
// same program: what was dropped is what a JavaScript engine ignores
// (esbuild keeps the line break automatic semicolon insertion depends on,
// as a semicolon). Code esbuild does not read as JavaScript (TypeScript,
// or code only QuickJS reads) is its own normal form: it is equivalent
// only to itself, byte for byte.
//
// esbuild's parser and printer were chosen over a token stream from the
// analysis parser's lexer (tdewolff/parse) because a lexer alone cannot
// tell a regular expression from a division, nor where a removed line
// break changed the program; the printer's output is the program's
// canonical text. Callers bound the code first (Validate runs
// internal/js/prescan through script.Prepare).
func Normalize(code string) string {
	res := api.Transform(wrapHead+code+wrapTail, api.TransformOptions{
		Loader:           api.LoaderJS,
		Target:           api.ESNext, // print what was written: nothing lowered
		Charset:          api.CharsetUTF8,
		MinifyWhitespace: true,
		LegalComments:    api.LegalCommentsNone,
		LogLevel:         api.LogLevelSilent,
	})
	out := string(res.Code)
	if len(res.Errors) > 0 || !strings.HasPrefix(out, normHead) || !strings.HasSuffix(out, normTail) {
		return code
	}
	return out[len(normHead) : len(out)-len(normTail)]
}

// equivalence is Capability.Equivalence of c: a hash of its normal code,
// its description, its input schema (compacted) and its pins (sorted).
func equivalence(c Capability) string {
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	field("equivalence/1")
	field(Normalize(c.Code))
	field(c.Description)
	schema := c.InputSchema
	var buf bytes.Buffer
	if len(schema) > 0 && json.Compact(&buf, schema) == nil {
		schema = buf.Bytes()
	}
	field(string(schema))
	for _, name := range slices.Sorted(maps.Keys(c.Pins)) {
		field(name + "@" + strconv.Itoa(c.Pins[name]))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// stamp sets what a registry records of a version about to be saved from
// what it holds: its code hash and equivalence.
func stamp(c *Capability) {
	c.CodeHash = CodeHash(c.Code)
	c.Equivalence = equivalence(*c)
}

// equivalentOf is the first of versions equivalent to c (whose
// Equivalence is set), computing the equivalence of versions saved before
// it was recorded.
func equivalentOf(c Capability, versions []Capability) (Capability, bool) {
	for _, v := range versions {
		eq := v.Equivalence
		if eq == "" {
			eq = equivalence(v)
		}
		if eq == c.Equivalence {
			return v, true
		}
	}
	return Capability{}, false
}

// CheckCode reports a version whose code is not the code it was
// published with (its CodeHash): changed in the store behind the
// registry's back. Versions saved before code hashes were recorded pass.
func CheckCode(c Capability) error {
	if c.CodeHash == "" || c.CodeHash == CodeHash(c.Code) {
		return nil
	}
	return fault.New(fault.Internal, "capability %s version %d: its code does not match the hash it was published with (%s); the store was changed outside the registry, and the version is refused", c.Name, c.Version, c.CodeHash)
}
