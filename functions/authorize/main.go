// Command authorize is the PML Sandbox authorize function: the streaming
// REST API's Lambda authorizer when the deployment authenticates with JWT
// (AuthMode=JWT). It only wires; see internal/authorizer. It runs no
// sandbox, and links none of the service (not internal/app): a third of
// the binary, started on every cold authorizer.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/pml-sandbox/pml/internal/authorizer"
	"github.com/pml-sandbox/pml/internal/lambdamain"
)

func main() {
	lambdamain.Run(lambdamain.Function{Init: wire})
}

// wire builds the authorizer of the JWTs PML_JWT_ISSUER and
// PML_JWT_AUDIENCE accept.
func wire(_ context.Context, log *slog.Logger) (any, error) {
	v, err := authorizer.New(authorizer.Config{Issuer: os.Getenv(authorizer.EnvIssuer), Audiences: authorizer.ParseAudiences(os.Getenv(authorizer.EnvAudience)), Logger: log})
	if err != nil {
		return nil, err
	}
	return authorizer.Handler(v), nil
}
