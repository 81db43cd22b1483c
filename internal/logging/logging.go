// Package logging makes the JSON logger every PML Sandbox process logs
// with. It is a leaf, so that the functions that run no sandbox (the
// aggregator, the authorizer) log the same way without linking the
// service's wiring.
package logging

import (
	"io"
	"log/slog"
	"os"
)

// EnvLevel names the level variable: debug, info, warn or error.
const EnvLevel = "PML_LOG_LEVEL"

// New returns a JSON logger writing to w at $PML_LOG_LEVEL, or at def when
// that is unset or not a level.
func New(w io.Writer, def slog.Level) *slog.Logger {
	level := def
	if v := os.Getenv(EnvLevel); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			level = def
		}
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}
