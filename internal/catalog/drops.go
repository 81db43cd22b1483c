package catalog

import (
	"context"
	"log/slog"
	"sync"
)

// maxDropsRemembered bounds what a DropLog remembers: a server listing ever
// new bad names must not grow it without end. Past the bound it forgets
// everything, and repeats resume once.
const maxDropsRemembered = 4096

// DropLog logs every tool left out of a catalog, with the reason, once per
// tool and reason. Catalogs are rebuilt on every refresh of a server's list
// and for every execution, so logging each rebuild would repeat the same
// line without end. It is safe for concurrent use; share one between the
// services of a process so each drop is told once.
type DropLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[[2]string]bool // {full name, reason}
}

// NewDropLog returns a DropLog writing warnings to log (slog.Default() when
// nil).
func NewDropLog(log *slog.Logger) *DropLog {
	if log == nil {
		log = slog.Default()
	}
	return &DropLog{log: log, seen: map[[2]string]bool{}}
}

// Drop logs that server:tool was left out because of reason, unless it was
// already logged for that reason. attrs are added to the log line.
func (d *DropLog) Drop(ctx context.Context, server, tool, reason string, attrs ...any) {
	key := [2]string{server + ":" + tool, reason}
	d.mu.Lock()
	if d.seen[key] {
		d.mu.Unlock()
		return
	}
	if len(d.seen) >= maxDropsRemembered {
		clear(d.seen)
	}
	d.seen[key] = true
	d.mu.Unlock()
	d.log.WarnContext(ctx, "tool dropped", append([]any{"tool", key[0], "reason", reason}, attrs...)...)
}
