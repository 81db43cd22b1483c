package script

import "github.com/pml-sandbox/pml/internal/js/analysis"

// CallSite is one place where the code calls a tool it names statically
// (analysis.Site): Line and Column in the source as written, Key where the
// engine reports the call in the code that runs (guest.Call's Line and
// Column, "line:column").
type CallSite struct {
	analysis.Site
	Key string
}

// CallSites lists where the code calls the tools it names statically, in
// the order of the code: empty when the analysis parser could not read
// it. Keys are those of Code as it is now (after Persist, when called
// after it).
func (p *Prepared) CallSites() []CallSite {
	out := make([]CallSite, len(p.sites))
	for i, s := range p.sites {
		off := s.Offset
		if p.added != nil && off >= p.added.at {
			off += len(p.added.text)
		}
		out[i] = CallSite{Site: s, Key: analysis.SiteKey(p.Code, off)}
	}
	return out
}
