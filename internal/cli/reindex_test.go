package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/cli"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// TestCapabilityReindex: `pml capability reindex` brings a capability an
// earlier release saved (a LATEST item without the index keys) into
// discovery, says what it did, and refuses to run without a table.
func TestCapabilityReindex(t *testing.T) {
	ctx := context.Background()
	inst := dynamolocal.Start(t)
	db := inst.Client()
	table := dynamolocal.TableName(t)
	if err := capability.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": s("CAP#old:one"), "sk": s("LATEST"), "name": s("old:one"), "version": n("1"), "id": s(capability.ID("old:one", 1)),
		"code": s("return 1"), "created_at": s("2026-01-01T00:00:00Z"), "updated_at": s("2026-01-01T00:00:00Z"), "calls": n("0"),
	}}); err != nil {
		t.Fatal(err)
	}
	reg := capability.NewDynamoRegistry(db, table)

	var out, errOut bytes.Buffer
	code := cli.Main(ctx, []string{"capability", "reindex", "--table", table, "--endpoint", inst.Endpoint}, &out, &errOut)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var got capability.Reindexed
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got != (capability.Reindexed{Indexed: 1}) {
		t.Fatalf("answer %s (%v); want one indexed", out.String(), err)
	}
	if !strings.Contains(errOut.String(), "reindex: 1 indexed, 0 already current") {
		t.Errorf("no progress line: %s", errOut.String())
	}
	if list, err := reg.List(ctx); err != nil || len(list) != 1 || list[0].Name != "old:one" {
		t.Fatalf("the index after reindex: %+v, %v", list, err)
	}

	out.Reset()
	errOut.Reset()
	t.Setenv("PML_CAPABILITIES_TABLE", "")
	if code := cli.Main(ctx, []string{"capability", "reindex"}, &out, &errOut); code != cli.ExitUsage || !strings.Contains(errOut.String(), "give --table") {
		t.Fatalf("without a table: exit %d: %s", code, errOut.String())
	}
}
