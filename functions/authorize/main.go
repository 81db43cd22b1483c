// Command authorize is the PML Sandbox authorize function: the streaming
// REST API's Lambda authorizer when the deployment authenticates with JWT
// (AuthMode=JWT). It only wires; see internal/authorizer. It runs no
// sandbox, and links none of the service (not internal/app): a third of
// the binary, started on every cold authorizer.
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/pml-sandbox/pml/internal/authorizer"
	"github.com/pml-sandbox/pml/internal/logging"
)

func main() {
	log := logging.New(os.Stdout, slog.LevelInfo)
	v, err := authorizer.New(authorizer.Config{Issuer: os.Getenv(authorizer.EnvIssuer), Audiences: authorizer.ParseAudiences(os.Getenv(authorizer.EnvAudience)), Logger: log})
	if err != nil {
		log.Error("init failed", "err", err)
		os.Exit(1)
	}
	lambda.Start(authorizer.Handler(v))
}
