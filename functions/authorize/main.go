// Command authorize is the PML Sandbox authorize function: the streaming
// REST API's Lambda authorizer when the deployment authenticates with JWT
// (AuthMode=JWT). It only wires; see internal/authorizer.
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/authorizer"
)

func main() {
	log := app.Logger(os.Stdout, slog.LevelInfo)
	v, err := authorizer.New(authorizer.Config{Issuer: os.Getenv(app.EnvJWTIssuer), Audiences: authorizer.ParseAudiences(os.Getenv(app.EnvJWTAudience)), Logger: log})
	if err != nil {
		log.Error("init failed", "err", err)
		os.Exit(1)
	}
	lambda.Start(authorizer.Handler(v))
}
