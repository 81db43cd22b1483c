package catalog

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"unicode"
)

// Hit is one search result.
type Hit struct {
	Tool  Tool    `json:"tool"`
	Score float64 `json:"score"`
}

// BM25F parameters. Names say most about what a tool does, titles are names
// for people, descriptions are long and chatty: the weights say so.
const (
	bm25K1      = 1.2
	bm25B       = 0.75
	weightName  = 3.0
	weightTitle = 2.0
	weightDesc  = 1.0
)

// stopwords carry no meaning in a query like "read a file from the disk".
var stopwords = map[string]bool{
	"a": true, "an": true, "the": true, "to": true, "of": true, "for": true, "in": true, "on": true,
	"and": true, "or": true, "with": true, "by": true, "from": true, "at": true, "is": true, "it": true,
	"this": true, "that": true, "be": true, "as": true, "i": true, "me": true, "my": true, "into": true,
}

// document is one tool's indexed fields.
type document struct {
	fields [3]map[string]int // term frequencies: name, title, description
	length [3]int
}

// Search ranks tools by lexical relevance to query with BM25F over the
// tool's name (server and tool name, weighted highest), title and
// description. Terms are split at punctuation, snake_case, kebab-case and
// camelCase, lower-cased and lightly stemmed, so "reading files" matches
// read_file. Only tools matching at least one term are returned, best first,
// ties by full name; limit <= 0 returns every hit.
func Search(tools []Tool, query string, limit int) []Hit {
	terms := queryTerms(query)
	if len(terms) == 0 || len(tools) == 0 {
		return nil
	}
	docs := make([]document, len(tools))
	var avg [3]float64
	df := map[string]int{}
	for i, t := range tools {
		texts := [3]string{t.Server + " " + t.Name, t.Title, t.Description}
		seen := map[string]bool{}
		for f, text := range texts {
			tf := map[string]int{}
			for _, tok := range Tokenize(text) {
				tf[tok]++
				docs[i].length[f]++
				if !seen[tok] {
					seen[tok] = true
					df[tok]++
				}
			}
			docs[i].fields[f] = tf
			avg[f] += float64(docs[i].length[f])
		}
	}
	n := float64(len(tools))
	for f := range avg {
		avg[f] = max(avg[f]/n, 1)
	}
	weights := [3]float64{weightName, weightTitle, weightDesc}

	var hits []Hit
	for i, d := range docs {
		score := 0.0
		for _, term := range terms {
			tf := 0.0
			for f := range d.fields {
				if c := d.fields[f][term]; c > 0 {
					norm := 1 - bm25B + bm25B*float64(d.length[f])/avg[f]
					tf += weights[f] * float64(c) / norm
				}
			}
			if tf == 0 {
				continue
			}
			dfi := float64(df[term])
			idf := math.Log(1 + (n-dfi+0.5)/(dfi+0.5))
			score += idf * tf / (bm25K1 + tf)
		}
		if score > 0 {
			hits = append(hits, Hit{Tool: tools[i], Score: score})
		}
	}
	slices.SortFunc(hits, func(a, b Hit) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(a.Tool.FullName(), b.Tool.FullName()))
	})
	if limit > 0 && len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}

// queryTerms are the distinct searchable terms of a query. Stopwords are
// dropped: a query made only of them matches nothing rather than every
// description that says "the".
func queryTerms(query string) []string {
	var terms []string
	for _, t := range Tokenize(query) {
		if !stopwords[t] && !slices.Contains(terms, t) {
			terms = append(terms, t)
		}
	}
	return terms
}

// Tokenize splits text into lower-cased, stemmed terms: at every character
// that is not a letter or digit, and inside words at camelCase boundaries
// ("readFile", "HTTPServer" → "http", "server").
func Tokenize(text string) []string {
	var out []string
	rs := []rune(text)
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			out = append(out, stem(strings.ToLower(string(rs[start:end]))))
		}
		start = -1
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		prev := rs[i-1]
		lowerToUpper := unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev))
		acronymEnd := unicode.IsUpper(r) && unicode.IsUpper(prev) && i+1 < len(rs) && unicode.IsLower(rs[i+1])
		if lowerToUpper || acronymEnd {
			flush(i)
			start = i
		}
	}
	flush(len(rs))
	return out
}

// stem strips the commonest English inflections so that "reads",
// "reading", "read" meet, and "writes", "writing", "write" meet. It is
// deliberately light: query and documents go through the same function, so
// a stem only has to be consistent, not a word.
func stem(w string) string {
	n := len(w)
	switch {
	case n > 5 && strings.HasSuffix(w, "ing"):
		w = w[:n-3]
	case n > 4 && strings.HasSuffix(w, "ied"):
		w = w[:n-3] + "y"
	case n > 4 && strings.HasSuffix(w, "ies"):
		w = w[:n-3] + "y"
	case n > 4 && strings.HasSuffix(w, "ed"):
		w = w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us"):
		w = w[:n-1]
	}
	if len(w) > 3 && strings.HasSuffix(w, "e") {
		w = w[:len(w)-1]
	}
	return w
}
