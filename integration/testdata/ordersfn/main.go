// Command ordersfn is a user's Lambda function for the Lambda tool source's
// integration test: it answers an order ({"id": N} → {"id": N, "status":
// "shipped"}), fails with a typed error for order 0 (errorType
// OrderNotFound), and appends one line per invocation to $ORDERS_LOG, so
// the test can tell that a refused call never reached it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
)

// OrderNotFound is the error of an order that does not exist; the runtime
// reports its type name as the invocation's errorType.
type OrderNotFound struct{ ID int }

func (e *OrderNotFound) Error() string { return fmt.Sprintf("no order %d", e.ID) }

type order struct {
	ID     int    `json:"id"`
	Status string `json:"status"`
}

func main() {
	lambda.Start(func(ctx context.Context, in struct {
		ID int `json:"id"`
	}) (*order, error) {
		if path := os.Getenv("ORDERS_LOG"); path != "" {
			if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintln(f, in.ID)
				f.Close()
			}
		}
		if in.ID == 0 {
			return nil, &OrderNotFound{ID: in.ID}
		}
		return &order{ID: in.ID, Status: "shipped"}, nil
	})
}
