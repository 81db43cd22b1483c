package capability_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// newTable creates a capabilities table in DynamoDB Local.
func newTable(t *testing.T) (*dynamodb.Client, string) {
	t.Helper()
	db := dynamolocal.Start(t).Client()
	table := dynamolocal.TableName(t)
	if err := capability.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	return db, table
}

// TestRegistryByName: Lookup reads the names asked for (a hundred and
// more, across DynamoDB's per-request bound), HasNamespace sees a save at
// once, and the call counts AddCalls writes survive a later save.
func TestRegistryByName(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		ctx := context.Background()
		var names []string
		for i := range 120 {
			name := fmt.Sprintf("n%d:a%d", i%3, i)
			names = append(names, name)
			if _, err := reg.Save(ctx, capability.Capability{Name: name, Code: fmt.Sprintf("return %d", i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := reg.Save(ctx, capability.Capability{Name: "n0:a0", Code: "return 'v2'", Description: "second"}, nil); err != nil {
			t.Fatal(err)
		}
		got, err := reg.Lookup(ctx, append(slices.Clone(names), "n0:missing", "nons:x", "n1:a1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 120 {
			t.Fatalf("Lookup found %d of 120", len(got))
		}
		if c := got["n0:a0"]; c.Version != 2 || c.Code != "return 'v2'" || c.Description != "second" {
			t.Fatalf("Lookup n0:a0 = %+v; want version 2", c)
		}
		if _, ok := got["n0:missing"]; ok {
			t.Fatal("Lookup found a name never saved")
		}
		if got, err := reg.Lookup(ctx, nil); err != nil || len(got) != 0 {
			t.Fatalf("Lookup(nil) = %v, %v", got, err)
		}
		for ns, want := range map[string]bool{"n0": true, "n2": true, "n9": false, "a0": false} {
			if has, err := reg.HasNamespace(ctx, ns); err != nil || has != want {
				t.Errorf("HasNamespace(%s) = %v, %v; want %v", ns, has, err, want)
			}
		}

		if err := reg.AddCalls(ctx, map[string]int64{"n1:a1": 3, "n2:a2": 1}); err != nil {
			t.Fatal(err)
		}
		if err := reg.AddCalls(ctx, map[string]int64{"n1:a1": 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Save(ctx, capability.Capability{Name: "n1:a1", Code: "return 'again'"}, nil); err != nil {
			t.Fatal(err)
		}
		c, err := reg.Get(ctx, "n1:a1", 0)
		if err != nil || c.Calls != 5 || c.Version != 2 {
			t.Fatalf("after counting and saving again: %+v, %v; want 5 calls, version 2", c, err)
		}
		if got, _ := reg.Lookup(ctx, []string{"n1:a1"}); got["n1:a1"].Calls != 5 {
			t.Fatalf("Lookup calls = %d; want 5", got["n1:a1"].Calls)
		}
		// A description removed by a later save is gone from the latest.
		if _, err := reg.Save(ctx, capability.Capability{Name: "n0:a0", Code: "return 3"}, nil); err != nil {
			t.Fatal(err)
		}
		if c, _ := reg.Get(ctx, "n0:a0", 0); c.Description != "" || c.Version != 3 {
			t.Fatalf("latest after a save without description: %+v", c)
		}
		if c, _ := reg.Get(ctx, "n0:a0", 2); c.Description != "second" || c.Code != "return 'v2'" {
			t.Fatalf("pinned version 2: %+v", c)
		}
	})
}

// TestRegistryChanges: the first Changes is the whole registry, later
// ones what was saved since (possibly again what the reader has), and an
// unchanged registry answers nothing new.
func TestRegistryChanges(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		ctx := context.Background()
		for _, n := range []string{"a:one", "a:two"} {
			if _, err := reg.Save(ctx, capability.Capability{Name: n, Code: "return 1"}, nil); err != nil {
				t.Fatal(err)
			}
		}
		ch, err := reg.Changes(ctx, "")
		if err != nil || !ch.Full || len(ch.Caps) != 2 || ch.Next == "" {
			t.Fatalf("first Changes: %+v, %v", ch, err)
		}
		if _, err := reg.Save(ctx, capability.Capability{Name: "b:three", Code: "return 3"}, nil); err != nil {
			t.Fatal(err)
		}
		next, err := reg.Changes(ctx, ch.Next)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(next.Caps, func(c capability.Capability) bool { return c.Name == "b:three" }) {
			t.Fatalf("Changes after a save lacks it: %+v", next)
		}
		list, err := reg.List(ctx)
		if err != nil || len(list) != 3 || list[0].Name != "a:one" || list[2].Name != "b:three" {
			t.Fatalf("List = %+v, %v", list, err)
		}
	})
}

// TestIndexFreshness: over a registry another process writes (a second
// registry value on the same file or table), a saved capability is in the
// index within the interval, and Lookup finds it at once.
func TestIndexFreshness(t *testing.T) {
	ctx := context.Background()
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "caps.json")
		writer, reader := capability.NewFileRegistry(path), capability.NewFileRegistry(path)
		defer reader.Close()
		ix := capability.NewIndex(reader, capability.IndexOptions{})
		if tools, err := ix.Tools(ctx); err != nil || len(tools) != 0 {
			t.Fatalf("empty index: %v %v", tools, err)
		}
		if _, err := writer.Save(ctx, capability.Capability{Name: "f:new", Code: "return 1", Description: "fresh"}, nil); err != nil {
			t.Fatal(err)
		}
		// The file registry's index checks the file on every read.
		tools, err := ix.Tools(ctx)
		if err != nil || len(tools) != 1 || tools[0].FullName() != "f:new" || tools[0].Description != "fresh" {
			t.Fatalf("index after a save: %+v %v", tools, err)
		}
		if err := writer.AddCalls(ctx, map[string]int64{"f:new": 2}); err != nil {
			t.Fatal(err)
		}
		if list, _ := ix.List(ctx); len(list) != 1 || list[0].Calls != 2 {
			t.Fatalf("counts not seen: %+v", list)
		}
	})
	t.Run("file replaced by hand", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "caps.json")
		reg := capability.NewFileRegistry(path)
		defer reg.Close()
		if _, err := reg.Save(ctx, capability.Capability{Name: "h:one", Code: "return 1"}, nil); err != nil {
			t.Fatal(err)
		}
		if got, _ := reg.Lookup(ctx, []string{"h:one"}); len(got) != 1 {
			t.Fatal("not found after save")
		}
		if err := os.WriteFile(path, []byte(`{"capabilities":{}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, _ := reg.Lookup(ctx, []string{"h:one"}); len(got) != 0 {
			t.Fatal("a file edited in place was not read again")
		}
	})
	t.Run("dynamodb", func(t *testing.T) {
		db, table := newTable(t)
		writer, reader := capability.NewDynamoRegistry(db, table), capability.NewDynamoRegistry(db, table)
		const interval = 300 * time.Millisecond
		ix := capability.NewIndex(reader, capability.IndexOptions{Interval: interval})
		if tools, err := ix.Tools(ctx); err != nil || len(tools) != 0 {
			t.Fatalf("empty index: %v %v", tools, err)
		}
		saved := time.Now()
		if _, err := writer.Save(ctx, capability.Capability{Name: "d:new", Code: "return 1"}, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := reader.Lookup(ctx, []string{"d:new"}); err != nil || len(got) != 1 {
			t.Fatalf("Lookup right after the save: %v %v", got, err)
		}
		for {
			tools, err := ix.Tools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(tools) == 1 {
				break
			}
			// Generous for a loaded machine: the bound is the interval.
			if time.Since(saved) > interval+5*time.Second {
				t.Fatalf("not in the index %v after the save", time.Since(saved))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// countingRegistry counts Changes calls.
type countingRegistry struct {
	capability.Registry
	changes atomic.Int64
}

func (c *countingRegistry) Changes(ctx context.Context, mark string) (capability.Changes, error) {
	c.changes.Add(1)
	return c.Registry.Changes(ctx, mark)
}

// TestIndexAsksAtMostOncePerInterval: readers within the interval share
// one refresh, and a failing registry leaves the last listing served.
func TestIndexAsksAtMostOncePerInterval(t *testing.T) {
	ctx := context.Background()
	db, table := newTable(t)
	base := capability.NewDynamoRegistry(db, table)
	if _, err := base.Save(ctx, capability.Capability{Name: "i:one", Code: "return 1"}, nil); err != nil {
		t.Fatal(err)
	}
	reg := &countingRegistry{Registry: base}
	ix := capability.NewIndex(reg, capability.IndexOptions{Interval: time.Hour})
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if tools, err := ix.Tools(ctx); err != nil || len(tools) != 1 {
				t.Errorf("%v %v", tools, err)
			}
		}()
	}
	wg.Wait()
	if n := reg.changes.Load(); n != 1 {
		t.Fatalf("50 reads asked the registry %d times; want 1", n)
	}
}

// gatedRegistry blocks Changes, after the first, until release is closed,
// saying on entered when one is blocked.
type gatedRegistry struct {
	capability.Registry
	calls   atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (g *gatedRegistry) Changes(ctx context.Context, mark string) (capability.Changes, error) {
	if g.calls.Add(1) > 1 {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Registry.Changes(ctx, mark)
}

// TestReadersDoNotWaitForARefresh: while one reader refreshes a stale
// index (a Query on DynamoDB, here held), the others are served the
// snapshot as it is at once.
func TestReadersDoNotWaitForARefresh(t *testing.T) {
	ctx := context.Background()
	base := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	if _, err := base.Save(ctx, capability.Capability{Name: "i:one", Code: "return 1"}, nil); err != nil {
		t.Fatal(err)
	}
	reg := &gatedRegistry{Registry: base, entered: make(chan struct{}), release: make(chan struct{})}
	ix := capability.NewIndex(reg, capability.IndexOptions{Interval: time.Millisecond})
	if _, err := ix.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the snapshot is stale now
	refreshed := make(chan error, 1)
	go func() {
		_, err := ix.Tools(ctx)
		refreshed <- err
	}()
	<-reg.entered
	served := make(chan int, 1)
	go func() {
		tools, _ := ix.Tools(ctx)
		served <- len(tools)
	}()
	select {
	case n := <-served:
		if n != 1 {
			t.Errorf("a reader during the refresh got %d tools, want the snapshot's 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Error("a reader waited for another's refresh")
	}
	close(reg.release)
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
}
