package guest

// The stretches of a fresh execution a profiling build counts apart
// (docs/BENCHMARKS.md, "Guest instructions per fresh execution and fib(25)"). The
// host marks where each begins; the guest marks its own through the
// pml.mark import, which only a guest built with PML_GUEST_PROFILE=1
// imports. Without the callgrind build tag mark does nothing and is
// compiled away.
type phase int32

const (
	phaseNone        phase = iota
	phaseRestore           // taking an instance in the post-init state
	phaseHostSetup         // the request's configuration, the run's state, loading it into the guest
	phaseGuestSetup        // pml_run up to compiling: the configuration read, the mcp object, args
	phaseCompile           // QuickJS parsing and compiling the wrapped script
	phaseRun               // the script, to its promise's settling
	phaseGuestResult       // the result document, written in the guest
	phaseHostResult        // reading the document, the Result, handing the instance back
	phaseReset             // the retire loop turning the instance back into the image
	phaseCount
)
