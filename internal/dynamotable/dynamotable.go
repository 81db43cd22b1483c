// Package dynamotable creates the DynamoDB tables the project's stores
// share a shape with — on demand, a string partition key pk and sort key
// sk, optionally a TTL attribute — for tests and local endpoints such as
// DynamoDB Local. In AWS, template.yaml declares them.
package dynamotable

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Create creates table with keys pk and sk, billed on demand, and turns
// on TTL on ttlAttribute unless it is empty.
func Create(ctx context.Context, db *dynamodb.Client, table, ttlAttribute string) error {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
	})
	if err != nil {
		return fmt.Errorf("creating table %s: %w", table, err)
	}
	if ttlAttribute == "" {
		return nil
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(ttlAttribute), Enabled: aws.Bool(true)},
	})
	if err != nil {
		return fmt.Errorf("enabling TTL on %s: %w", table, err)
	}
	return nil
}
