package approvalpage

// effectsView is what an execution did to the world, as the page shows it:
// its effects with their idempotency keys and statuses, and the rollback
// button. Filled by the effects' own code; the template is
// templates/effects.html.
type effectsView struct{}
