package approvalpage

// planView is the script's plan as the page shows it: the call sites of
// tools that need a person, how many calls each has made, and the
// decisions that cover a call site or every pending call. Filled by the
// plan's own code; the template is templates/plan.html.
type planView struct{}
