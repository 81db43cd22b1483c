package script

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// segment is one decoded source-map mapping: a generated column and the
// original position it comes from, all 0-based, columns in UTF-16 code
// units as the Source Map v3 format counts them.
type segment struct {
	genCol, srcLine, srcCol int
}

// sourceMap is the part of a Source Map v3 document the stripper needs:
// the mappings of its one source, indexed by generated line.
//
// esbuild's Go API has no exported reader for the maps it writes, and the
// Go source-map readers (go-sourcemap/sourcemap) are unmaintained and not
// modules; the mappings format is small and frozen, so it is decoded here.
type sourceMap struct {
	lines [][]segment
}

// parseSourceMap decodes the "mappings" of a Source Map v3 JSON document.
func parseSourceMap(doc []byte) (*sourceMap, error) {
	var raw struct {
		Version  int    `json:"version"`
		Mappings string `json:"mappings"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("source map: %w", err)
	}
	if raw.Version != 3 {
		return nil, fmt.Errorf("source map: version %d, want 3", raw.Version)
	}
	m := &sourceMap{}
	var line []segment
	// Source index, line and column are relative to the previous segment
	// across the whole map; the generated column restarts on each line.
	var src, srcLine, srcCol, name int
	for i, group := range strings.Split(raw.Mappings, ";") {
		genCol := 0
		line = nil
		for _, seg := range strings.Split(group, ",") {
			if seg == "" {
				continue
			}
			f, err := decodeVLQ(seg)
			if err != nil {
				return nil, fmt.Errorf("source map: line %d: %w", i, err)
			}
			switch len(f) {
			case 1:
				genCol += f[0]
				continue // a generated column with no origin
			case 4, 5:
				genCol += f[0]
				src += f[1]
				srcLine += f[2]
				srcCol += f[3]
				if len(f) == 5 {
					name += f[4]
				}
			default:
				return nil, fmt.Errorf("source map: line %d: a segment of %d fields", i, len(f))
			}
			line = append(line, segment{genCol: genCol, srcLine: srcLine, srcCol: srcCol})
		}
		slices.SortStableFunc(line, func(a, b segment) int { return a.genCol - b.genCol })
		m.lines = append(m.lines, line)
	}
	return m, nil
}

const base64Digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// decodeVLQ decodes the base64 VLQ fields of one segment.
func decodeVLQ(s string) ([]int, error) {
	var out []int
	shift, value := 0, 0
	for i := 0; i < len(s); i++ {
		d := strings.IndexByte(base64Digits, s[i])
		if d < 0 {
			return nil, fmt.Errorf("bad VLQ digit %q", s[i])
		}
		if shift > 30 {
			return nil, fmt.Errorf("VLQ value too long")
		}
		value += (d & 31) << shift
		if d&32 != 0 {
			shift += 5
			continue
		}
		n := value >> 1
		if value&1 != 0 {
			n = -n
		}
		out = append(out, n)
		shift, value = 0, 0
	}
	if shift != 0 {
		return nil, fmt.Errorf("VLQ value cut short")
	}
	return out, nil
}

// lookup returns the original position of a generated one (0-based, UTF-16
// columns). A position between two mappings belongs to the one before it,
// offset by its distance from that mapping's start (code between two
// mappings is copied through: a member chain, an argument list), but never
// past the next mapping's origin. A line with no mapping takes the last one
// of the lines before it. indent is the width of the line's leading
// whitespace: esbuild maps a statement from the start of its line, indent
// included, to the statement's first token.
func (m *sourceMap) lookup(line, col, indent int) (srcLine, srcCol int, ok bool) {
	if line < 0 || line >= len(m.lines) {
		return 0, 0, false
	}
	segs := m.lines[line]
	i := -1
	for j, s := range segs {
		if s.genCol > col {
			break
		}
		i = j
	}
	switch {
	case i < 0 && len(segs) > 0:
		return segs[0].srcLine, segs[0].srcCol, true
	case i < 0:
		for l := line - 1; l >= 0; l-- {
			if n := len(m.lines[l]); n > 0 {
				s := m.lines[l][n-1]
				return s.srcLine, s.srcCol, true
			}
		}
		return 0, 0, false
	}
	s := segs[i]
	c := s.srcCol + col - max(s.genCol, min(indent, col))
	if i+1 < len(segs) && segs[i+1].srcLine == s.srcLine && segs[i+1].srcCol > s.srcCol {
		c = min(c, segs[i+1].srcCol)
	}
	return s.srcLine, c, true
}

// text is source split into lines the way esbuild and QuickJS count them
// (\n, \r\n, \r, U+2028, U+2029), for converting between the character
// columns users see and the UTF-16 columns of source maps.
type text []string

func splitLines(s string) text {
	var out text
	start := 0
	for i := 0; i < len(s); {
		n := 0
		switch {
		case s[i] == '\n':
			n = 1
		case s[i] == '\r':
			n = 1
			if i+1 < len(s) && s[i+1] == '\n' {
				n = 2
			}
		case strings.HasPrefix(s[i:], "\u2028"), strings.HasPrefix(s[i:], "\u2029"):
			n = 3
		default:
			i++
			continue
		}
		out = append(out, s[start:i])
		i += n
		start = i
	}
	return append(out, s[start:])
}

// utf16Col converts a 0-based character column of line l to UTF-16 units.
func (t text) utf16Col(l, chars int) int {
	if l < 0 || l >= len(t) {
		return chars
	}
	units := 0
	for _, r := range t[l] {
		if chars == 0 {
			break
		}
		units += utf16.RuneLen(r)
		chars--
	}
	return units + chars // past the end: count on as if ASCII
}

// charCol converts a 0-based UTF-16 column of line l to characters.
func (t text) charCol(l, units int) int {
	if l < 0 || l >= len(t) {
		return units
	}
	chars := 0
	for _, r := range t[l] {
		if units <= 0 {
			break
		}
		units -= utf16.RuneLen(r)
		chars++
	}
	if units > 0 {
		chars += units
	}
	return chars
}

// lineChars is the length of line l in characters.
func (t text) lineChars(l int) int {
	if l < 0 || l >= len(t) {
		return 0
	}
	return utf8.RuneCountInString(t[l])
}
