package dynamolocal_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

func TestMain(m *testing.M) {
	code := dynamolocal.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goroutine leak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func TestSharedInstanceServesTables(t *testing.T) {
	a, b := dynamolocal.Start(t), dynamolocal.Start(t)
	if a != b {
		t.Fatalf("two instances in one test binary: %s and %s", a.Endpoint, b.Endpoint)
	}
	ctx := context.Background()
	db := a.Client()
	table := dynamolocal.TableName(t)
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key}); err != nil {
		t.Fatal(err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		t.Fatalf("item not read back: %v %v", out, err)
	}
}

func TestDedicatedInstanceCanBeStopped(t *testing.T) {
	inst := dynamolocal.Dedicated(t)
	if inst == dynamolocal.Start(t) {
		t.Fatal("Dedicated returned the shared instance")
	}
	db := inst.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := db.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
	inst.Stop()
	inst.Stop() // idempotent
	if _, err := db.ListTables(ctx, &dynamodb.ListTablesInput{}); err == nil {
		t.Fatal("a stopped instance still answers")
	}
}

func TestTableNameIsValidAndUnique(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)
	for _, name := range []string{"plain", "with spaces: and (punctuation) #1/ü", strings.Repeat("x", 300)} {
		t.Run(name, func(t *testing.T) {
			a, b := dynamolocal.TableName(t), dynamolocal.TableName(t)
			if !valid.MatchString(a) {
				t.Fatalf("invalid table name %q", a)
			}
			if a == b {
				t.Fatalf("two calls gave the same name %q", a)
			}
		})
	}
}

// fakeTB records how a start ended; Fatalf and Skip end the goroutine as
// testing's do.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper()        {}
func (f *fakeTB) Cleanup(func()) {}
func (f *fakeTB) Fatalf(format string, a ...any) {
	f.fatal = fmt.Sprintf(format, a...)
	runtime.Goexit()
}
func (f *fakeTB) Skip(a ...any) { f.skip = fmt.Sprint(a...); runtime.Goexit() }

func TestUnusableSetupFailsLoudly(t *testing.T) {
	tests := []struct {
		name                string
		env                 map[string]string
		wantFatal, wantSkip string
	}{
		{"no jar in PML_DYNAMODB_LOCAL_DIR", map[string]string{"PML_DYNAMODB_LOCAL_DIR": t.TempDir()}, "no DynamoDBLocal.jar", ""},
		{"no java on PATH", map[string]string{"PATH": t.TempDir()}, "java is not installed", ""},
		{"asked to skip", map[string]string{"PML_SKIP_DYNAMODB": "1", "PATH": t.TempDir()}, "", "PML_SKIP_DYNAMODB=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			f := &fakeTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				inst := dynamolocal.Dedicated(f)
				inst.Stop()
				t.Error("Dedicated returned an instance")
			}()
			<-done
			if !strings.Contains(f.fatal, tt.wantFatal) || !strings.Contains(f.skip, tt.wantSkip) ||
				(tt.wantFatal == "") != (f.fatal == "") || (tt.wantSkip == "") != (f.skip == "") {
				t.Fatalf("fatal %q, skip %q; want fatal %q, skip %q", f.fatal, f.skip, tt.wantFatal, tt.wantSkip)
			}
		})
	}
}
