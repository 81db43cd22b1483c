package suspend

import (
	"context"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// TestLedgerEntryOnItsWay: an entry whose record is not written yet (a
// large state on its way, or a writer that died) counts for writeWindow,
// then holds nothing back.
func TestLedgerEntryOnItsWay(t *testing.T) {
	now := time.Now().UTC()
	c := newCore(&fileBackend{dir: t.TempDir()}, Options{Now: func() time.Time { return now }, Quota: Quota{Count: 1, Bytes: 1 << 20}})
	ctx := context.Background()
	if err := c.hold(ctx, suspendedQuota, "p", "ex_writing", 10, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := c.hold(ctx, suspendedQuota, "p", "ex_next", 10, now.Add(time.Hour)); fault.As(err).Limit != fault.LimitSuspended {
		t.Fatalf("while the first may be on its way: %v", err)
	}
	now = now.Add(writeWindow + time.Second)
	if err := c.hold(ctx, suspendedQuota, "p", "ex_next", 10, now.Add(time.Hour)); err != nil {
		t.Fatalf("once the first is past its window: %v", err)
	}
}
