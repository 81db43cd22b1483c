package app

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// openSessions opens the store of sessions beside the suspensions cfg
// names: the same DynamoDB table (partition SESS#<id>), or the directory's
// sessions/; none without either, and sessions are then refused.
func (c *awsConfig) openSessions(ctx context.Context, cfg SuspensionConfig) (suspend.Sessions, error) {
	switch {
	case cfg.Table != "":
		db, err := c.dynamo(ctx, "")
		if err != nil {
			return nil, err
		}
		return suspend.NewDynamoSessions(db, cfg.Table, suspend.Options{Quota: cfg.SessionQuota}), nil
	case cfg.Dir != "":
		return suspend.NewFileSessions(SessionsDir(cfg.Dir), suspend.Options{Quota: cfg.SessionQuota}), nil
	}
	return nil, nil
}

// openPageSessions opens where the approval page keeps its sessions,
// beside the suspensions cfg names: the same DynamoDB table (partition
// PAGE#<hash>), seen by every container, or the directory's
// page-sessions/, seen by every process over it; none without either (the
// page then keeps them in memory).
func (c *awsConfig) openPageSessions(ctx context.Context, cfg SuspensionConfig) (suspend.PageSessions, error) {
	switch {
	case cfg.Table != "":
		db, err := c.dynamo(ctx, "")
		if err != nil {
			return nil, err
		}
		return suspend.NewDynamoPageSessions(db, cfg.Table, suspend.Options{}), nil
	case cfg.Dir != "":
		return suspend.NewFilePageSessions(filepath.Join(cfg.Dir, "page-sessions"), suspend.Options{}), nil
	}
	return nil, nil
}

// OpenSessions opens the store of sessions cfg names, as an App does (pml
// session reads it without the rest); nil when cfg names none.
func OpenSessions(ctx context.Context, cfg SuspensionConfig) (suspend.Sessions, error) {
	var c awsConfig
	return c.openSessions(ctx, cfg)
}

// SessionsDir is where the directory store keeps sessions, beside the
// suspensions in dir.
func SessionsDir(dir string) string { return filepath.Join(dir, "sessions") }

// SessionBounds reads PML_SESSION_TTL and PML_SESSION_MAX_BYTES (0 for
// either unset: the service's defaults).
func SessionBounds() (time.Duration, int, error) {
	var ttl time.Duration
	if v := os.Getenv(EnvSessionTTL); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > execution.MaxSessionTTL {
			return 0, 0, fault.New(fault.InvalidRequest, "%s must be a duration between 1s and 24h, such as 1h, not %q", EnvSessionTTL, v)
		}
		ttl = d
	}
	var maxBytes int
	if v := os.Getenv(EnvSessionMaxBytes); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, 0, fault.New(fault.InvalidRequest, "%s must be a positive number of bytes, not %q", EnvSessionMaxBytes, v)
		}
		maxBytes = n
	}
	return ttl, maxBytes, nil
}

// openJournal opens the journal of effects beside the suspensions cfg
// names: the same DynamoDB table (partition JRNL#<id>), or the directory's
// journal/; none without either.
func (c *awsConfig) openJournal(ctx context.Context, cfg SuspensionConfig) (journal.Store, error) {
	switch {
	case cfg.Table != "":
		db, err := c.dynamo(ctx, "")
		if err != nil {
			return nil, err
		}
		return journal.NewDynamo(db, cfg.Table, journal.Options{}), nil
	case cfg.Dir != "":
		return journal.NewFile(JournalDir(cfg.Dir), journal.Options{}), nil
	}
	return nil, nil
}

// OpenJournal opens the journal of effects cfg names, as an App does (pml
// trace reads it without the rest); nil when cfg names none.
func OpenJournal(ctx context.Context, cfg SuspensionConfig) (journal.Store, error) {
	var c awsConfig
	return c.openJournal(ctx, cfg)
}

// JournalDir is where the directory store keeps the journal of effects,
// beside the suspensions in dir.
func JournalDir(dir string) string { return filepath.Join(dir, "journal") }
