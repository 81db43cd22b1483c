// Package filelock takes a flock on an open file without outwaiting the
// caller: a blocking flock cannot be cancelled, so a process whose disk
// or peer stalls would hold its request past every deadline. Lock polls
// a non-blocking flock every millisecond until the context is done.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Lock takes how (unix.LOCK_SH or unix.LOCK_EX) on fd, waiting at most
// until ctx is done; the error then carries the context's cause. Release
// it with unix.Flock(fd, unix.LOCK_UN) or by closing fd.
func Lock(ctx context.Context, fd *os.File, how int) error {
	for {
		err := unix.Flock(int(fd.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("locking %s: %w", fd.Name(), err)
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("locking %s: %w", fd.Name(), context.Cause(ctx))
		case <-t.C:
		}
	}
}
