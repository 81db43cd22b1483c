package trace

import (
	"crypto/rand"
	"encoding/hex"
)

// LogEntry is one console line a script wrote, as the engine kept it.
type LogEntry struct {
	Level   string  `json:"level"` // log, info, warn, error
	Message string  `json:"message"`
	AtMS    float64 `json:"at_ms"` // since the execution started
}

// NewExecutionID returns a random, URL-safe execution id. Front ends mint
// one when they must name an execution before it starts (an event stream
// sends its id in a header first).
func NewExecutionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ex_" + hex.EncodeToString(b[:])
}
