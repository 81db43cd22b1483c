package learn

import (
	"math"
	"regexp"
	"strings"
	"sync"

	"github.com/pml-sandbox/pml/internal/redact"
)

// A literal that looks like a secret is never kept: not in a trace, not in
// a candidate, not in a suggestion (its slot becomes an input the caller
// passes). internal/redact masks the secrets the deployment knows by
// value; a script's own literals are unknown values, so they are judged by
// shape, three ways:
//
//  1. The deployment's known secrets (redact.Redactor: the MCP pool's
//     header values), when the caller passes its redactor.
//  2. Known shapes of credentials: private keys, JWTs, AWS access key ids,
//     GitHub, Slack, Stripe/OpenAI/Anthropic-style and Google API keys,
//     "Bearer …"/"Basic …", credentials in a URL (user:pass@, or a query
//     parameter named token, key, secret, password, signature…), and
//     "password=…"-style assignments.
//  3. Random strings: a run of at least 16 letters and digits (+ and =
//     allowed; any other character ends it) that mixes letters and digits,
//     switches between lower case, upper case and digits at least once
//     every three characters (0.34 a character: random base62 does 0.6,
//     words with a number in them 0.1–0.3), and carries at least 3.3 bits
//     of Shannon entropy a character; or a run of 32 hex digits or more
//     with 0.2 switches and 3.0 bits (hex has 16 symbols). Measured on
//     random strings, 99 % of 16-character base62 tokens pass; words,
//     identifiers, dates, file names and paths do not.
//
// The test errs towards withholding: a withheld literal only becomes an
// argument of the suggestion instead of a constant.
var secretShapes = []shape{
	{chars: "-", needles: []string{"-----BEGIN"}, re: `-----BEGIN [A-Z ]*PRIVATE KEY`},
	{chars: ".", needles: []string{"eyJ"}, re: `\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.`},
	{chars: "A", needles: []string{"AKIA", "ASIA"}, re: `\b(AKIA|ASIA)[0-9A-Z]{16}\b`},
	{chars: "_", needles: []string{"gh"}, re: `\bgh[pousr]_[A-Za-z0-9]{20,}`},
	{chars: "_", needles: []string{"github_pat_"}, re: `\bgithub_pat_[A-Za-z0-9_]{20,}`},
	{chars: "-", needles: []string{"xox"}, re: `\bxox[abposr]-[A-Za-z0-9-]{10,}`},
	{chars: "_-", needles: []string{"k_", "k-"}, re: `\b(sk|pk|rk)[-_](live|test|proj|ant)[-_][A-Za-z0-9_-]{10,}|\bsk-[A-Za-z0-9_-]{20,}`},
	{chars: "A", needles: []string{"AIza"}, re: `\bAIza[0-9A-Za-z_-]{30,}`},
	{chars: " \t\n", lower: true, needles: []string{"bearer", "basic"}, re: `(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}`},
	{chars: ":", needles: []string{"://"}, re: `://[^/\s:@]+:[^/\s@]+@`},
	{chars: "=", lower: true, needles: []string{"token=", "key=", "secret=", "password=", "pwd=", "sig=", "signature="},
		re: `(?i)[?&](access_token|id_token|refresh_token|token|key|api_key|apikey|secret|client_secret|password|pwd|sig|signature|x-amz-signature)=[^&\s]{6,}`},
	{chars: ":=", lower: true, needles: []string{"password", "passwd", "secret", "token", "key"},
		re: `(?i)\b(password|passwd|secret|token|api[_-]?key|private[_-]?key)\s*[:=]\s*\S{4,}`},
}

// shape is one credential shape: a regular expression, tried only when
// the text holds one of its characters and one of its needles (most text
// holds none, and they cost a scan where the expression costs a
// backtracking match).
type shape struct {
	chars   string // the text must hold one of these to hold the shape
	needles []string
	lower   bool // the needles are looked for in the lower-cased text
	re      string
	once    sync.Once
	rx      *regexp.Regexp
}

func (sh *shape) regexp() *regexp.Regexp {
	sh.once.Do(func() { sh.rx = regexp.MustCompile(sh.re) })
	return sh.rx
}

// candidates calls fn with each shape s may hold, until fn returns false.
func candidates(s string, fn func(*shape) bool) {
	lower := ""
	for i := range secretShapes {
		sh := &secretShapes[i]
		if !strings.ContainsAny(s, sh.chars) {
			continue
		}
		text := s
		if sh.lower {
			if lower == "" {
				lower = strings.ToLower(s)
			}
			text = lower
		}
		for _, n := range sh.needles {
			if strings.Contains(text, n) {
				if !fn(sh) {
					return
				}
				break
			}
		}
	}
}

// LooksSecret reports whether s looks like a secret by the rules above;
// known, when not nil, adds the deployment's known secrets.
func LooksSecret(s string, known *redact.Redactor) bool {
	if len(s) < redact.MinLen {
		return false
	}
	if known != nil && known.String(s) != s {
		return true
	}
	if len(s) < minShaped {
		return false // shorter than any shape and any random run
	}
	shaped := false
	candidates(s, func(sh *shape) bool {
		shaped = sh.regexp().MatchString(s)
		return !shaped
	})
	if shaped {
		return true
	}
	found := false
	eachRun(s, func(run string) bool {
		found = randomRun(run)
		return !found
	})
	return found
}

// maskSecrets replaces each secret-looking run of text (a comment) with
// redact.Mask.
func maskSecrets(text string, known *redact.Redactor) string {
	if known != nil {
		text = known.String(text)
	}
	candidates(text, func(sh *shape) bool {
		text = sh.regexp().ReplaceAllString(text, redact.Mask)
		return true
	})
	var b strings.Builder
	last := 0
	eachRunAt(text, func(start, end int) bool {
		if randomRun(text[start:end]) {
			b.WriteString(text[last:start])
			b.WriteString(redact.Mask)
			last = end
		}
		return true
	})
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

func runChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '='
}

func eachRun(s string, fn func(run string) bool) {
	eachRunAt(s, func(start, end int) bool { return fn(s[start:end]) })
}

// eachRunAt calls fn with the bounds of every maximal run of runChar
// characters at least minRun long, until fn returns false.
func eachRunAt(s string, fn func(start, end int) bool) {
	start := -1
	for i := 0; i <= len(s); i++ {
		if i < len(s) && runChar(s[i]) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 && i-start >= minRun {
			if !fn(start, i) {
				return
			}
		}
		start = -1
	}
}

// minShaped is the shortest text a shape matches ("://a:b@").
const minShaped = 7

const (
	minRun         = 16
	minHexRun      = 32
	minEntropy     = 3.3
	minHexEntropy  = 3.0
	minSwitches    = 0.34
	minHexSwitches = 0.2
)

// randomRun reports whether run looks randomly generated (see above).
func randomRun(run string) bool {
	letters, digits, hexOnly := 0, 0, true
	switches, prev := 0, byte(0)
	for i := 0; i < len(run); i++ {
		c := run[i]
		var class byte
		switch {
		case c >= '0' && c <= '9':
			digits++
			class = 'd'
		case c >= 'a' && c <= 'z':
			letters++
			class = 'l'
			hexOnly = hexOnly && c <= 'f'
		case c >= 'A' && c <= 'Z':
			letters++
			class = 'u'
			hexOnly = hexOnly && c <= 'F'
		default:
			class = 'o'
			hexOnly = false
		}
		if i > 0 && class != prev {
			switches++
		}
		prev = class
	}
	if letters == 0 || digits == 0 {
		return false
	}
	rate := float64(switches) / float64(len(run)-1)
	if hexOnly && len(run) >= minHexRun {
		return rate >= minHexSwitches && entropy(run) >= minHexEntropy
	}
	return rate >= minSwitches && entropy(run) >= minEntropy
}

// entropy is the Shannon entropy of s in bits a byte.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}
