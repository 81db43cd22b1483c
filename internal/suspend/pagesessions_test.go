package suspend_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// TestPageSessions: a page session stored by one store is read by another
// over the same storage (another process, another Lambda container) until
// it expires or is deleted — a sign-out in one holds in the other at
// once; keys and values are bounded.
func TestPageSessions(t *testing.T) {
	for _, k := range []struct {
		name string
		open func(t *testing.T) func(suspend.Options) suspend.PageSessions
	}{
		{"file", func(t *testing.T) func(suspend.Options) suspend.PageSessions {
			dir := filepath.Join(t.TempDir(), "page-sessions")
			return func(o suspend.Options) suspend.PageSessions { return suspend.NewFilePageSessions(dir, o) }
		}},
		{"dynamodb", func(t *testing.T) func(suspend.Options) suspend.PageSessions {
			db := dynamolocal.Start(t).Client()
			table := dynamolocal.TableName(t)
			if err := suspend.CreateTable(context.Background(), db, table); err != nil {
				t.Fatal(err)
			}
			return func(o suspend.Options) suspend.PageSessions { return suspend.NewDynamoPageSessions(db, table, o) }
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newClock()
			open := k.open(t)
			a, b := open(suspend.Options{Now: clk.Now}), open(suspend.Options{Now: clk.Now})
			if _, ok, err := b.Get(ctx, "k1"); ok || err != nil {
				t.Fatalf("an unknown key: %v %v", ok, err)
			}
			if err := a.Put(ctx, "k1", []byte(`{"p":"alice"}`), clk.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := a.Put(ctx, "k2", []byte(`{"p":"bob"}`), clk.Now().Add(2*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := b.Get(ctx, "k1"); !ok || err != nil || string(v) != `{"p":"alice"}` {
				t.Fatalf("read by another store: %q %v %v", v, ok, err)
			}
			if err := b.Delete(ctx, "k1"); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := a.Get(ctx, "k1"); ok {
				t.Fatal("a deleted session is read")
			}
			if err := a.Delete(ctx, "k1"); err != nil {
				t.Fatalf("deleting it again: %v", err)
			}
			clk.Add(2 * time.Hour)
			if _, ok, _ := a.Get(ctx, "k2"); ok {
				t.Fatal("an expired session is read")
			}
			for name, err := range map[string]error{
				"a key with a slash": a.Put(ctx, "../x", nil, clk.Now().Add(time.Hour)),
				"an empty key":       a.Put(ctx, "", nil, clk.Now().Add(time.Hour)),
				"a value too large":  a.Put(ctx, "k3", []byte(strings.Repeat("x", suspend.MaxPageSessionBytes+1)), clk.Now().Add(time.Hour)),
			} {
				if !errors.Is(err, suspend.ErrInvalid) {
					t.Errorf("%s: %v", name, err)
				}
			}
			if _, ok, err := a.Get(ctx, "../x"); ok || err != nil {
				t.Errorf("reading a bad key: %v %v", ok, err)
			}
		})
	}
}

// TestFilePageSessionsSwept: storing a session sweeps the directory of
// the expired ones.
func TestFilePageSessionsSwept(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := suspend.NewFilePageSessions(dir, suspend.Options{Now: clk.Now})
	ctx := context.Background()
	if err := s.Put(ctx, "old", []byte("x"), clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Hour)
	if err := s.Put(ctx, "new", []byte("y"), clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "old.json")); !os.IsNotExist(err) {
		t.Fatalf("the expired session's file stays: %v", err)
	}
}
