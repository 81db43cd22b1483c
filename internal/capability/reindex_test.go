package capability_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pml-sandbox/pml/internal/capability"
)

// putOldCapability writes name as a release before the index saved it: a
// version item and a LATEST item without the index keys, and no namespace
// item.
func putOldCapability(t *testing.T, db *dynamodb.Client, table, name string, calls int64) {
	t.Helper()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, sk := range []string{"V#000001", "LATEST"} {
		item, err := attributevalue.MarshalMap(map[string]any{
			"pk": "CAP#" + name, "sk": sk, "name": name, "version": 1, "id": capability.ID(name, 1),
			"code": "return 7", "description": "saved before the index", "created_at": now, "updated_at": now, "calls": calls,
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReindexBringsOldCapabilitiesIn: capabilities an earlier release
// saved are callable by name but invisible to discovery and to mcp[ns];
// Reindex gives them the index keys and namespace items (keeping their
// call counts), a process's next index refresh finds them, and a second
// Reindex has nothing to do.
func TestReindexBringsOldCapabilitiesIn(t *testing.T) {
	ctx := context.Background()
	db, table := newTable(t)
	reg := capability.NewDynamoRegistry(db, table)
	old := []string{"old:a", "old:b", "legacy:x"}
	for _, n := range old {
		putOldCapability(t, db, table, n, 7)
	}
	if _, err := reg.Save(ctx, capability.Capability{Name: "new:one", Code: "return 1"}, nil); err != nil {
		t.Fatal(err)
	}

	before, err := reg.Changes(ctx, "")
	if err != nil || len(before.Caps) != 1 {
		t.Fatalf("before: the index lists %+v (%v); want new:one alone", before.Caps, err)
	}
	if ok, err := reg.HasNamespace(ctx, "legacy"); err != nil || ok {
		t.Fatalf("before: namespace legacy found=%v (%v); want not yet", ok, err)
	}
	if got, err := reg.Lookup(ctx, old); err != nil || len(got) != len(old) {
		t.Fatalf("before: by name %d of %d (%v); an old capability is callable by name", len(got), len(old), err)
	}

	var pages int
	done, err := reg.Reindex(ctx, func(capability.Reindexed) { pages++ })
	if err != nil || done != (capability.Reindexed{Indexed: 3, Current: 1}) || pages == 0 {
		t.Fatalf("Reindex = %+v, %v (%d progress reports); want 3 indexed, 1 current", done, err, pages)
	}

	after, err := reg.Changes(ctx, before.Next)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range old {
		i := slices.IndexFunc(after.Caps, func(c capability.Capability) bool { return c.Name == n })
		if i < 0 {
			t.Fatalf("the refresh after Reindex lacks %s: %+v", n, after.Caps)
		}
		if c := after.Caps[i]; c.Calls != 7 || c.Code != "return 7" || c.Version != 1 {
			t.Errorf("%s after Reindex: %+v; want its code, version and call count kept", n, c)
		}
	}
	for _, ns := range []string{"old", "legacy", "new"} {
		if ok, err := reg.HasNamespace(ctx, ns); err != nil || !ok {
			t.Errorf("after: namespace %s found=%v (%v)", ns, ok, err)
		}
	}
	if list, err := reg.List(ctx); err != nil || len(list) != 4 {
		t.Fatalf("after: List = %d capabilities (%v); want 4", len(list), err)
	}

	again, err := reg.Reindex(ctx, nil)
	if err != nil || again != (capability.Reindexed{Current: 4}) {
		t.Fatalf("a second Reindex = %+v, %v; want nothing to do", again, err)
	}
	// A save after Reindex moves the item on as usual.
	if saved, err := reg.Save(ctx, capability.Capability{Name: "old:a", Code: "return 8"}, nil); err != nil || saved.Version != 2 || saved.Calls != 7 {
		t.Fatalf("saving old:a again: %+v, %v", saved, err)
	}
}
