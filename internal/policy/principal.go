package policy

import (
	"fmt"
	"strings"

	"github.com/cedar-policy/cedar-go/types"
)

// Shapes of principal: how its parts are read (the Principal entity's
// kind).
const (
	shapeNone  = "none" // auth off: the empty principal
	shapeOther = "other"
	shapeARN   = "arn"
	shapeJWT   = "jwt"
)

// principal is a principal, or a pattern, split into its parts.
type principal struct {
	shape string
	// authority are the parts that vouch, spelled exactly by a pattern:
	// an ARN's partition, service, region, account and resource type and
	// the separators between its names; a JWT's issuer; another shape's
	// whole text.
	authority []string
	// names are the parts vouched for, each matched by a pattern's
	// glob: an ARN's resource names after its type, a JWT's subject.
	names []string
}

// The parts of an ARN's authority, as messages name them.
var arnAuthority = []string{"partition", "service", "region", "account", "resource type"}

// parsePrincipal splits s into its parts. An ARN lacking any of its six
// fields, or its resource, is of no known shape: matched exactly.
func parsePrincipal(s string) principal {
	if s == "" {
		return principal{shape: shapeNone, authority: []string{""}}
	}
	if rest, ok := strings.CutPrefix(s, "jwt:"); ok {
		if iss, sub, ok := strings.Cut(rest, "#"); ok {
			return principal{shape: shapeJWT, authority: []string{iss}, names: []string{sub}}
		}
	}
	if f := strings.SplitN(s, ":", 6); len(f) == 6 && f[0] == "arn" && f[5] != "" {
		// The resource: its type, then its names, each after the
		// separator that precedes it. The separators vouch too: "a/b" and
		// "a:b" are different resources.
		res := f[5]
		i := strings.IndexAny(res, "/:")
		if i < 0 {
			return principal{shape: shapeARN, authority: []string{f[1], f[2], f[3], f[4], res, ""}}
		}
		typ, seps, names := res[:i], "", []string(nil)
		for res = res[i:]; res != ""; {
			seps += res[:1]
			res = res[1:]
			j := strings.IndexAny(res, "/:")
			if j < 0 {
				j = len(res)
			}
			names = append(names, res[:j])
			res = res[j:]
		}
		return principal{shape: shapeARN, authority: []string{f[1], f[2], f[3], f[4], typ, seps}, names: names}
	}
	return principal{shape: shapeOther, authority: []string{s}}
}

// isAssumedRole reports whether p is an assumed role's session ARN
// (arn:aws:sts::<account>:assumed-role/<role>/<session>), or a pattern
// for one.
func (p principal) isAssumedRole() bool {
	return p.shape == shapeARN && p.authority[4] == "assumed-role"
}

// resourceNames is an ARN's resource after its type: its names, each
// after its separator ("/ops/alice").
func (p principal) resourceNames() string {
	var b strings.Builder
	for i, n := range p.names {
		b.WriteByte(p.authority[5][i])
		b.WriteString(n)
	}
	return b.String()
}

// sessionRefusal says why an assumed role's pattern cannot be honoured,
// "" when it can. The role is the authority: whoever may assume it is
// who the account lets. The session name is a label the caller of
// sts:AssumeRole writes, so a literal session identifies a person only
// within a role the pattern names; with a '*' in the role it would
// identify anyone, in any matching role, who chose that label.
func (p principal) sessionRefusal() string {
	if !p.isAssumedRole() || len(p.names) != 2 {
		return ""
	}
	if strings.Contains(p.names[0], wildcard) && p.names[1] != wildcard {
		return "a session name is chosen by whoever assumes the role, so it cannot identify a person in a role the pattern does not name: " +
			"name the role (assumed-role/<role>/<session>), or match every session of the roles (assumed-role/<role pattern>/*)"
	}
	return ""
}

// wildcard is the one wildcard of a principal pattern.
const wildcard = "*"

// PatternRefusal says why pattern, as a deployment configures it
// (PML_APPROVERS, PML_TRUSTED_CLIENTS), is not a principal pattern, ""
// when it is one: a known shape, well formed, with no '*' in a part that
// vouches and none that lets a caller's label stand for a person.
func PatternRefusal(pattern string) string {
	p := parsePrincipal(pattern)
	switch p.shape {
	case shapeJWT:
		iss, sub := p.authority[0], p.names[0]
		switch {
		case iss == "" || sub == "":
			return "a JWT principal is jwt:<issuer>#<subject>"
		case strings.Contains(iss, wildcard):
			return "a '*' in the issuer would take subjects vouched for by any issuer whose URL fits it: spell out the issuer"
		}
		return ""
	case shapeARN:
		for i, what := range arnAuthority {
			if strings.Contains(p.authority[i], wildcard) {
				return fmt.Sprintf("a '*' in the %s would let principals the deployment does not vouch for match: spell out the partition, service, region, account and resource type", what)
			}
		}
		if p.isAssumedRole() && (len(p.names) != 2 || p.authority[5] != "//") {
			return "an assumed role's principal is arn:<partition>:sts::<account>:assumed-role/<role>/<session>: write assumed-role/<role>/* for every session of the role"
		}
		return p.sessionRefusal()
	}
	switch {
	case strings.HasPrefix(pattern, "jwt:"):
		return "a JWT principal is jwt:<issuer>#<subject>"
	case strings.HasPrefix(pattern, "arn:"):
		return "not an ARN (arn:<partition>:<service>:<region>:<account>:<resource>)"
	}
	return "neither an IAM ARN (arn:…) nor a JWT principal (<issuer>#<subject>)"
}

// PatternCondition is the Cedar condition a principal pattern stands for:
// true of exactly the principals the pattern matches, part by part, so
// that a '*' never runs from one part of a principal into another. A
// principal is split into the parts that vouch (an ARN's partition,
// service, region, account and resource type; a JWT's issuer), which the
// condition compares whole ('*' there is a character), and the names they
// vouch for (an ARN's resource names after its type, an assumed role's
// role and session; a JWT's subject), each matched by its own glob with
// Cedar's like. An ARN's names are matched as one string, with the
// separators between them compared whole first: with exactly the
// pattern's separators, each literal separator of the pattern can only
// meet its own, so no '*' crosses one. Any other shape (local:person) is
// compared whole. "" for a pattern that matches nothing: the empty one, and
// an assumed role's with a '*' in the role and a session that is not '*'
// (sessionRefusal).
//
// Why a '*' must not cross: an assumed role's session name is chosen by
// the caller of sts:AssumeRole, so "assumed-role/*/alice@example.com"
// would be satisfied by an agent in any role that names its session
// alice@example.com, and "assumed-role/Approvers*" by the role
// ApproversEvil, or by any session of Approvers.
func PatternCondition(pattern string) string {
	p := parsePrincipal(pattern)
	switch p.shape {
	case shapeNone:
		return ""
	case shapeJWT:
		return fmt.Sprintf(`principal.kind == "jwt" && principal.issuer == %s && principal.subject like %s`,
			Quote(p.authority[0]), likePattern(p.names[0]))
	case shapeARN:
		if p.sessionRefusal() != "" {
			return ""
		}
		a := p.authority
		c := fmt.Sprintf(`principal.kind == "arn" && principal.partition == %s && principal.service == %s && principal.region == %s && principal.account == %s && principal.resourceType == %s && principal.separators == %s`,
			Quote(a[0]), Quote(a[1]), Quote(a[2]), Quote(a[3]), Quote(a[4]), Quote(a[5]))
		switch {
		case p.isAssumedRole() && a[5] == "//":
			return c + fmt.Sprintf(` && principal.role like %s && principal.session like %s`, likePattern(p.names[0]), likePattern(p.names[1]))
		case len(p.names) > 0:
			return c + " && principal.resourceNames like " + likePattern(p.resourceNames())
		}
		return c
	}
	return "principal.text == " + Quote(pattern)
}

// Quote writes s as a Cedar string literal.
func Quote(s string) string { return `"` + escape(s) + `"` }

// likePattern writes glob as a Cedar like pattern: each '*' a wildcard,
// everything else literal.
func likePattern(glob string) string { return `"` + escape(glob) + `"` }

// escape escapes s for a Cedar string, or a like pattern (where every '*'
// is a wildcard: principal patterns have no literal '*'): quotes and
// backslashes, and control characters as \u{...}, so the literal reads
// back as exactly s.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u{%x}`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// principalEntity is the Principal entity of the principal text s: its
// parts as attributes.
func principalEntity(s string) types.Entity {
	p := parsePrincipal(s)
	attrs := types.RecordMap{"kind": types.String(p.shape), "text": types.String(s)}
	for _, k := range []types.String{"partition", "service", "region", "account", "resourceType", "separators",
		"resourceNames", "role", "session", "issuer", "subject"} {
		attrs[k] = types.String("")
	}
	switch p.shape {
	case shapeJWT:
		attrs["issuer"], attrs["subject"] = types.String(p.authority[0]), types.String(p.names[0])
	case shapeARN:
		for i, k := range []types.String{"partition", "service", "region", "account", "resourceType", "separators"} {
			attrs[k] = types.String(p.authority[i])
		}
		attrs["resourceNames"] = types.String(p.resourceNames())
		if p.isAssumedRole() && p.authority[5] == "//" {
			attrs["role"], attrs["session"] = types.String(p.names[0]), types.String(p.names[1])
		}
	}
	return types.Entity{UID: principalUID(s), Attributes: types.NewRecord(attrs)}
}
