package execution

import (
	"context"
	"errors"
)

// ErrClaimLost is what a Checkpointer's error wraps when the execution
// was taken over by another runner: this one must stop, and write nothing
// more of it (the journal included).
var ErrClaimLost = errors.New("the execution was taken over by another runner")

// Checkpointer keeps the checkpoints of an execution that runs under a
// claim (internal/runs): the service hands it one before each effect the
// execution sends, and at least every few seconds of its run otherwise.
// The checkpoints are the service's own (opaque here); a runner that takes
// the execution over hands the last one back (Request.Checkpoint).
type Checkpointer interface {
	// Checkpoint keeps state as the execution's last checkpoint. Once it
	// returns nil, a runner that takes the execution over continues from
	// state; an error means it was not kept, and the effect it was taken
	// for is not sent.
	Checkpoint(ctx context.Context, state []byte) error
	// Uncontinuable records that the execution cannot be continued
	// (why): should its runner die, it fails.
	Uncontinuable(ctx context.Context, why string) error
}
