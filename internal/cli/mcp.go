package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// mcpAuthConfig is the MCP OAuth wiring of a command that runs code: its
// credentials in the user's data directory, and a login agent when
// --login asks for one.
func mcpAuthConfig(login string) (app.MCPAuthConfig, error) {
	cfg := app.MCPAuthConfig{CredentialsDir: app.MCPCredentialsDir()}
	switch login {
	case "never", "":
	case "headless":
		cfg.Agent = oauthclient.Headless{}
	default:
		return cfg, usagef("--login must be never or headless, not %q", login)
	}
	return cfg, nil
}

func mcpCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	if len(args) == 0 {
		return ExitUsage, usagef("want a subcommand: pml mcp login NAME | pml mcp status")
	}
	switch args[0] {
	case "login":
		return mcpLoginCmd(ctx, args[1:], out, errOut)
	case "status":
		return mcpStatusCmd(ctx, args[1:], out, errOut)
	}
	return ExitUsage, usagef("unknown subcommand %q: want login or status", args[0])
}

// serverFlags name the MCP servers: every command that has a service, and
// the mcp subcommands.
type serverFlags struct {
	mcp     listFlag
	openapi listFlag
	config  string
}

func (f *serverFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.mcp, "mcp", "an MCP server as NAME=URL (repeatable; adds to $"+app.EnvMCPServers+" and --config)")
	fs.Var(&f.openapi, "openapi", "an OpenAPI service as NAME=URL or NAME=FILE of its OpenAPI 3.0/3.1 document: one tool per operation (repeatable; adds to $"+app.EnvMCPServers+" and --config)")
	fs.StringVar(&f.config, "config", "", "server configuration file: MCP servers, OpenAPI services and Lambda functions (JSON or YAML; adds to $"+app.EnvMCPServers+")")
}

func mcpLoginCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("mcp login", errOut)
	var sf serverFlags
	sf.register(fs)
	secret := fs.String("secret", "", "store the credentials in this AWS Secrets Manager secret (ARN) instead of the user's data directory, for the deployment")
	headless := fs.Bool("headless", false, "fetch the authorization URL without a browser (for authorization servers that redirect at once)")
	noBrowser := fs.Bool("no-browser", false, "print the authorization URL without opening a browser")
	scope := fs.String("scope", "", "scopes to request besides those the server asks for (space-separated)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for the authorization")
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	if fs.NArg() != 1 {
		return ExitUsage, usagef("want one server name: pml mcp login NAME")
	}
	cfg, err := findServer(&sf, fs.Arg(0))
	if err != nil {
		return ExitUsage, err
	}
	if *secret != "" {
		cfg.Auth.Secret = *secret
	}
	if cfg.Auth.Type == oauthclient.TypeNone || cfg.Auth.Type == oauthclient.TypeClientCredentials {
		return ExitUsage, usagef("server %q uses auth %s: there is nothing to log in to", cfg.Name, cfg.Auth.Type)
	}
	if err := cfg.Validate(); err != nil {
		return ExitUsage, usageError{err}
	}
	var agent oauthclient.UserAgent = oauthclient.Headless{}
	if !*headless {
		agent = browserAgent{w: errOut, open: !*noBrowser}
	}
	red := redact.New()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	src, err := oauthclient.Build(ctx, oauthclient.Setup{Name: cfg.Name, URL: cfg.URL, Config: cfg.Auth,
		CredentialsDir: app.MCPCredentialsDir(), Secrets: app.SecretsClient, Refs: secretRefs(), Agent: agent,
		HTTPClient: &http.Client{Timeout: 30 * time.Second}, AddSecret: red.Add})
	if err != nil {
		return ExitFailed, errors.New(red.String(err.Error()))
	}
	ch, err := probe(ctx, cfg)
	if err != nil {
		return ExitFailed, errors.New(red.String(err.Error()))
	}
	if _, err := src.Login(ctx, ch, strings.Fields(*scope)); err != nil {
		return ExitFailed, errors.New(red.String(err.Error()))
	}
	fmt.Fprintf(errOut, "pml: logged in to %s\n", cfg.Name)
	return ExitOK, writeJSON(out, src.Status(ctx))
}

// findServer is the configured server called name.
func findServer(sf *serverFlags, name string) (mcpkind.Config, error) {
	cfgs, err := sf.mcpConfigs()
	if err != nil {
		return mcpkind.Config{}, err
	}
	var names []string
	for _, c := range cfgs {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	return mcpkind.Config{}, usagef("no MCP server named %q (configured: %s); give --config or --mcp %s=URL", name, strings.Join(names, ", "), name)
}

// probe asks the server, without credentials, what it wants: the Bearer
// challenge of its 401 (or an empty one when it answers anyway; some
// servers ask only for later requests).
func probe(ctx context.Context, cfg mcpkind.Config) (oauthclient.Challenge, error) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + mcpkind.ProtocolVersion +
		`","capabilities":{},"clientInfo":{"name":"pml-sandbox","version":"0.1.0"}}}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return oauthclient.Challenge{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		// Redacted by the caller: the URL may hold credentials.
		return oauthclient.Challenge{}, fmt.Errorf("reaching MCP server %q: %w", cfg.Name, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return oauthclient.ParseChallenge(resp.Header), nil
}

func mcpStatusCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("mcp status", errOut)
	var sf serverFlags
	sf.register(fs)
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	cfgs, err := sf.mcpConfigs()
	if err != nil {
		return ExitUsage, err
	}
	red := redact.New()
	out2 := make([]oauthclient.Status, 0, len(cfgs))
	refs := secretRefs()
	for _, c := range cfgs {
		st := oauthclient.Status{Server: c.Name, Type: oauthclient.TypeName(c.Auth.Type), State: "none"}
		switch {
		case c.Auth.Type == oauthclient.TypeNone:
		case !c.OAuth():
			st.State = "static headers"
		default:
			src, err := oauthclient.Build(ctx, oauthclient.Setup{Name: c.Name, URL: c.URL, Config: c.Auth,
				CredentialsDir: app.MCPCredentialsDir(), Secrets: app.SecretsClient, Refs: refs,
				HTTPClient: &http.Client{Timeout: 30 * time.Second}, AddSecret: red.Add})
			if err != nil {
				st.State, st.Error = "misconfigured", red.String(err.Error())
				break
			}
			st = src.Status(ctx)
			st.Error = red.String(st.Error)
		}
		out2 = append(out2, st)
	}
	return ExitOK, writeJSON(out, map[string]any{"servers": out2})
}

// browserAgent shows the authorization URL to the person at the terminal
// and opens their browser when there is one.
type browserAgent struct {
	w    io.Writer
	open bool
}

func (b browserAgent) Open(ctx context.Context, authURL string) error {
	fmt.Fprintf(b.w, "pml: to log in, open this URL in a browser:\n\n  %s\n\npml: waiting for the authorization (Ctrl-C to stop)…\n", authURL)
	if b.open {
		if err := openBrowser(authURL); err != nil {
			fmt.Fprintf(b.w, "pml: no browser opened (%v); open the URL yourself\n", err)
		}
	}
	return nil
}

// openBrowser starts $BROWSER, or the desktop's opener where there is a
// desktop, without waiting for it.
func openBrowser(u string) error {
	var cmd *exec.Cmd
	switch {
	case os.Getenv("BROWSER") != "":
		cmd = exec.Command(os.Getenv("BROWSER"), u)
	case runtime.GOOS == "darwin":
		cmd = exec.Command("open", u)
	case runtime.GOOS == "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	case os.Getenv("DISPLAY") != "" || os.Getenv("WAYLAND_DISPLAY") != "":
		cmd = exec.Command("xdg-open", u)
	default:
		return errors.New("no desktop session")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// secretRefs resolves the secret references of a server's OAuth client
// secret, reading Secrets Manager through the default AWS configuration
// when one is ${secret:}.
func secretRefs() *secretref.Resolver {
	return secretref.New(func(ctx context.Context) (secretref.API, error) { return app.SecretsClient(ctx) }, secretref.Options{})
}
