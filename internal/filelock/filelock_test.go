package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	holder, other, reader := open(), open(), open()
	ctx := context.Background()
	if err := Lock(ctx, holder, unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if err := Lock(ctx, reader, unix.LOCK_SH); err != nil {
		t.Fatalf("a second shared lock: %v", err)
	}
	// An exclusive lock waits for both, and gives up with its context.
	cause := errors.New("the caller's deadline")
	short, cancel := context.WithTimeoutCause(ctx, 20*time.Millisecond, cause)
	defer cancel()
	if err := Lock(short, other, unix.LOCK_EX); !errors.Is(err, cause) {
		t.Fatalf("an exclusive lock under a shared one: %v, want the context's cause", err)
	}
	// Released, it is taken at once.
	_ = unix.Flock(int(holder.Fd()), unix.LOCK_UN)
	_ = unix.Flock(int(reader.Fd()), unix.LOCK_UN)
	if err := Lock(ctx, other, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
}
