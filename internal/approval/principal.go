package approval

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pml-sandbox/pml/internal/catalog"
)

// Shapes of principal: how its parts are read.
const (
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

// matchPrincipal reports whether pattern matches principal p (the empty
// principal, auth off, matches nothing). It matches part by part, never
// as one string: a '*' that could run across the parts of a principal
// would let whoever picks one part satisfy a pattern meant for another.
// An assumed role's session name is the sharpest case: the caller of
// sts:AssumeRole chooses it, so "assumed-role/*/alice@example.com" would
// be satisfied by an agent in any role that names its session
// alice@example.com, and "assumed-role/Approvers*" by the role
// ApproversEvil, or by any session of Approvers, the '*' having run over
// the '/'.
//
// So a principal is split into the parts that vouch (authority: who says
// the rest is so) and the names they vouch for:
//
//   - an ARN, arn:<partition>:<service>:<region>:<account>:<type>/<name>…:
//     the partition, service, region, account and resource type vouch;
//     the names are the resource's parts after its type, split at '/' and
//     ':' (an assumed role's role and session, an IAM user's path and
//     name);
//   - a JWT principal, jwt:<issuer>#<subject>: the issuer vouches (split
//     at the first '#': an OpenID issuer has no fragment, so a subject
//     holding a '#' cannot pass for an issuer); the subject is the name;
//   - any other shape (local:person, which the CLI adds itself): the whole
//     principal vouches, and is matched exactly.
//
// A pattern matches a principal when both have the same shape, spell the
// parts that vouch identically (a '*' there is a character, never a
// wildcard — and ParseApprovers refuses it), and have as many names, each
// matched by its own (catalog.MatchGlob, case counting). A '*' therefore
// never crosses a ':', '/' or '#', a pattern's session only ever matches
// a session, and a pattern naming fewer or more parts than a principal
// has does not match it. One more pattern matches nothing, and is refused
// by ParseApprovers: an assumed role's, whose role holds a '*' and whose
// session is anything but '*' (sessionRefusal).
func matchPrincipal(pattern, p string) bool {
	if p == "" {
		return false
	}
	pat, got := parsePrincipal(pattern), parsePrincipal(p)
	if pat.shape != got.shape || !slices.Equal(pat.authority, got.authority) || len(pat.names) != len(got.names) {
		return false
	}
	if pat.sessionRefusal() != "" {
		return false
	}
	for i, glob := range pat.names {
		if !catalog.MatchGlob(glob, got.names[i]) {
			return false
		}
	}
	return true
}

// isAssumedRole reports whether p is an assumed role's session ARN
// (arn:aws:sts::<account>:assumed-role/<role>/<session>), or a pattern
// for one.
func (p principal) isAssumedRole() bool {
	return p.shape == shapeARN && p.authority[4] == "assumed-role"
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

// patternRefusal says why pattern, as a deployment configures it, is not
// an approver pattern, "" when it is one: a known shape, well formed,
// with no '*' in a part that vouches and none that lets a caller's label
// stand for a person.
func patternRefusal(pattern string) string {
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
