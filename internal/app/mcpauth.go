package app

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/userdata"
)

// MCPAuthConfig says where MCP servers' OAuth credentials are kept and
// whether the tool sources may log in by themselves.
type MCPAuthConfig struct {
	// CredentialsDir keeps the credentials of servers without an
	// auth.secret ("" for memory only, as in the Lambda functions, whose
	// servers keep theirs in Secrets Manager).
	CredentialsDir string
	// Agent, when set, runs the authorization-code flow when a server
	// asks for a login or more scopes (pml run --login headless).
	Agent oauthclient.UserAgent
}

// MCPCredentialsDir is the CLI's credentials directory:
// $PML_MCP_CREDENTIALS_DIR, else mcp-credentials/ in the user's data
// directory.
func MCPCredentialsDir() string { return userdata.Path(EnvMCPCredsDir, "mcp-credentials") }

// oauth is where the tool sources keep OAuth credentials: the
// configured directory, the app's Secrets Manager client, the agent.
func (m MCPAuthConfig) oauth(aws *awsConfig) toolsource.OAuth {
	return toolsource.OAuth{CredentialsDir: m.CredentialsDir, Secrets: aws.secrets, Agent: m.Agent}
}

// secrets is the process's one Secrets Manager client (MCP servers'
// OAuth credentials, secret references, the approval key), made when
// first needed.
func (c *awsConfig) secrets(ctx context.Context) (oauthclient.SecretsAPI, error) {
	cfg, err := c.load(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sm == nil {
		c.sm = secretsmanager.NewFromConfig(cfg)
	}
	return c.sm, nil
}

// SecretsClient is a Secrets Manager client from the default AWS
// configuration, for commands that write credentials (pml mcp login
// --secret).
func SecretsClient(ctx context.Context) (oauthclient.SecretsAPI, error) {
	var c awsConfig
	return c.secrets(ctx)
}
