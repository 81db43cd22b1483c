package approvalpage

import "github.com/pml-sandbox/pml/internal/execution"

// effectsView is what an execution did to the world, as the page shows it:
// its effects with their idempotency keys and statuses, read-only (the
// rollback button comes with undo). The template is
// templates/effects.html.
type effectsView struct {
	Effects []effectView
	// Applied counts the effects that happened; Unsure those whose
	// outcome is not known (pending or unknown).
	Applied, Unsure int
}

// effectView is one effect, as a row.
type effectView struct {
	CallID       int
	Server, Tool string
	Key          string
	Status       string
	Error        string // its code and message, when it did not apply
}

// newEffectsView is the page's view of effects, nil when there are none.
func newEffectsView(effects []execution.Effect) *effectsView {
	if len(effects) == 0 {
		return nil
	}
	v := &effectsView{}
	for _, e := range effects {
		ev := effectView{CallID: e.CallID, Server: e.Server, Tool: e.Tool, Key: e.Key, Status: e.Status}
		if e.Error != nil {
			ev.Error = string(e.Error.Code) + ": " + e.Error.Message
		}
		switch e.Status {
		case execution.EffectApplied:
			v.Applied++
		case execution.EffectPending, execution.EffectUnknown:
			v.Unsure++
		}
		v.Effects = append(v.Effects, ev)
	}
	return v
}
