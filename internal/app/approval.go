package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/userdata"
)

// ApprovalConfig says who decides what a person must approve, and how the
// people who decide are reached.
type ApprovalConfig struct {
	// Policy: approver principals, and whether the caller decides.
	Policy approval.Policy
	// KeySecret names the Secrets Manager secret holding the key that
	// seals the state of an elicitation (the deployment); else KeyFile
	// holds it, created on first use (locally).
	KeySecret string
	KeyFile   string
	// Bus is the EventBridge bus suspension notices go to; without it
	// they are only logged.
	Bus string
	// Page configures the approval page.
	Page PageConfig
	// MaxGrant is the most calls one grant may cover (a person approving
	// a call site for N calls chooses N up to it): PML_MAX_GRANT_CALLS,
	// default execution.DefaultMaxGrant.
	MaxGrant int
	// OnSuspend, when set, is told of every suspension besides the log
	// and the bus (pml serve prints a sign-in link); OnDraft likewise of
	// every new capability draft.
	OnSuspend func(context.Context, execution.SuspensionNotice)
	OnDraft   func(context.Context, capability.DraftNotice)
}

// PageConfig configures the approval page: where it is, and how people
// sign in to it.
type PageConfig struct {
	// URL is the page's external base URL (PML_APPROVAL_URL): what
	// suspension notices, answers and URL-mode elicitations link to. Empty
	// on pml serve: each request's own.
	URL string
	// OIDC signs people in through the deployment's provider.
	OIDC *approvalpage.OIDC
	// OIDCSecretARN names the Secrets Manager secret holding the client
	// secret, read at start when OIDC has none.
	OIDCSecretARN string
	// Links are pml serve's one-time local sign-in links.
	Links *approvalpage.LocalLinks
}

// PageFromEnv reads the page's settings: PML_APPROVAL_URL, PML_OIDC_ISSUER,
// PML_OIDC_CLIENT_ID, PML_OIDC_CLIENT_SECRET, PML_OIDC_CLIENT_SECRET_ARN,
// PML_OIDC_REDIRECT_URL.
func PageFromEnv() (PageConfig, error) {
	pc := PageConfig{URL: strings.TrimSpace(os.Getenv(EnvApprovalURL)), OIDCSecretARN: os.Getenv(EnvOIDCSecretARN)}
	if pc.URL != "" {
		if u, err := url.Parse(pc.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return PageConfig{}, fault.New(fault.InvalidRequest, "%s must be the approval page's base URL, such as https://api.example.com, not %q", EnvApprovalURL, pc.URL)
		}
	}
	issuer, client := strings.TrimSpace(os.Getenv(EnvOIDCIssuer)), strings.TrimSpace(os.Getenv(EnvOIDCClientID))
	switch {
	case issuer == "" && client == "":
		return pc, nil
	case issuer == "" || client == "":
		return PageConfig{}, fault.New(fault.InvalidRequest, "sign-in on the approval page needs both %s and %s", EnvOIDCIssuer, EnvOIDCClientID)
	}
	pc.OIDC = &approvalpage.OIDC{Issuer: issuer, ClientID: client, ClientSecret: os.Getenv(EnvOIDCClientSecret), RedirectURL: os.Getenv(EnvOIDCRedirectURL)}
	return pc, nil
}

// Event of a suspension notice on the bus (EventBridge's source and
// detail-type): what a rule that alerts approvers matches on. A
// capability draft is announced with DraftDetailType
// (capability.DraftNotice: its name, author and code hash, never its
// code, which may hold what its author should not have written down).
const (
	NoticeSource     = "pml.sandbox"
	NoticeDetailType = "Execution suspended"
	DraftDetailType  = "Capability draft proposed"
)

// ApprovalFromEnv reads the approval policy and its key and bus as the
// deployment sets them: PML_APPROVERS, PML_CALLER_DECIDES ("on" lets the
// caller decide; off unless set), PML_TRUSTED_CLIENTS, PML_SELF_APPROVAL
// (off unless set), PML_APPROVAL_KEY_SECRET, PML_APPROVAL_KEY_FILE,
// PML_APPROVAL_BUS.
func ApprovalFromEnv(callerDecidesByDefault bool) (ApprovalConfig, error) {
	policy, err := PolicyOf(os.Getenv(EnvApprovers), os.Getenv(EnvTrustedClients))
	if err != nil {
		return ApprovalConfig{}, err
	}
	if policy.CallerDecides, err = OnOff(EnvCallerDecides, os.Getenv(EnvCallerDecides), callerDecidesByDefault); err != nil {
		return ApprovalConfig{}, err
	}
	if policy.SelfApproval, err = OnOff(EnvSelfApproval, os.Getenv(EnvSelfApproval), false); err != nil {
		return ApprovalConfig{}, err
	}
	page, err := PageFromEnv()
	if err != nil {
		return ApprovalConfig{}, err
	}
	maxGrant, err := MaxGrantOf(os.Getenv(EnvMaxGrant))
	if err != nil {
		return ApprovalConfig{}, err
	}
	return ApprovalConfig{Policy: policy, KeySecret: os.Getenv(EnvApprovalKeySecret), KeyFile: ApprovalKeyFile(), Bus: os.Getenv(EnvApprovalBus), Page: page,
		MaxGrant: maxGrant}, nil
}

// maxGrantBound is the most a deployment may let one grant cover: a
// grant past the tool-call limit of any execution could never be used
// up, and one that large is no longer a person reading a plan.
const maxGrantBound = 10000

// MaxGrantOf reads PML_MAX_GRANT_CALLS: empty is the default
// (execution.DefaultMaxGrant), else a whole number from 1 to 10000.
func MaxGrantOf(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return execution.DefaultMaxGrant, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxGrantBound {
		return 0, fault.New(fault.InvalidRequest, "%s must be a whole number of calls from 1 to %d, not %q", EnvMaxGrant, maxGrantBound, v)
	}
	return n, nil
}

// PolicyOf reads the principal lists of a policy: approvers and trusted
// clients, each comma-separated patterns (approval.ParseApprovers).
func PolicyOf(approvers, trustedClients string) (approval.Policy, error) {
	a, err := approval.ParseApprovers(approvers)
	if err != nil {
		return approval.Policy{}, fault.Wrap(fault.InvalidRequest, err, EnvApprovers)
	}
	c, err := approval.ParseApprovers(trustedClients)
	if err != nil {
		return approval.Policy{}, fault.Wrap(fault.InvalidRequest, err, EnvTrustedClients)
	}
	return approval.Policy{Approvers: a, TrustedClients: c}, nil
}

// OnOff reads a switch: "on" or "off" (also true/false, 1/0), def when
// empty.
func OnOff(name, v string, def bool) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "":
		return def, nil
	case "on", "true", "1", "yes":
		return true, nil
	case "off", "false", "0", "no":
		return false, nil
	}
	return false, fault.New(fault.InvalidRequest, "%s must be on or off, not %q", name, v)
}

// ApprovalKeyFile is the local key file: $PML_APPROVAL_KEY_FILE, else
// approval.key in the user's data directory.
func ApprovalKeyFile() string { return userdata.Path(EnvApprovalKeyFile, "approval.key") }

// notifiers are what openApproval makes: how suspensions and capability
// drafts are announced.
type notifiers struct {
	suspended func(context.Context, execution.SuspensionNotice)
	drafted   func(context.Context, capability.DraftNotice)
}

// openApproval loads the state key and makes the notifiers cfg asks for.
func (a *App) openApproval(ctx context.Context, cfg ApprovalConfig, log *slog.Logger) (approval.Key, notifiers, error) {
	var key approval.Key
	switch {
	case cfg.KeySecret != "":
		s, err := a.secretString(ctx, cfg.KeySecret)
		if err != nil {
			return nil, notifiers{}, fmt.Errorf("reading the approval state key: %w", err)
		}
		if key, err = approval.ParseKey(s); err != nil {
			return nil, notifiers{}, fmt.Errorf("secret %s: %w", cfg.KeySecret, err)
		}
	case cfg.KeyFile != "":
		var err error
		if key, err = approval.LoadKeyFile(cfg.KeyFile); err != nil {
			return nil, notifiers{}, fmt.Errorf("approval state key %s: %w", cfg.KeyFile, err)
		}
	}
	var bus *eventbridge.Client
	if cfg.Bus != "" {
		awsCfg, err := a.aws.load(ctx)
		if err != nil {
			return nil, notifiers{}, err
		}
		bus = eventbridge.NewFromConfig(awsCfg)
	}
	// put sends one event; the answer must not wait on the bus for long,
	// and a lost notice is logged (the caller logged the same), never the
	// request's failure.
	put := func(ctx context.Context, detailType string, detail any, attrs ...any) {
		if bus == nil {
			return
		}
		body, _ := json.Marshal(detail)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		out, err := bus.PutEvents(pctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
			EventBusName: aws.String(cfg.Bus), Source: aws.String(NoticeSource), DetailType: aws.String(detailType),
			Detail: aws.String(string(body)), Resources: []string{},
		}}})
		if err == nil && out.FailedEntryCount > 0 {
			err = fmt.Errorf("%s: %s", aws.ToString(out.Entries[0].ErrorCode), aws.ToString(out.Entries[0].ErrorMessage))
		}
		if err != nil {
			log.WarnContext(ctx, "notice not sent", append(attrs, "detail_type", detailType, "bus", cfg.Bus, "err", err)...)
		}
	}
	return key, notifiers{
		suspended: func(ctx context.Context, n execution.SuspensionNotice) {
			if cfg.Page.URL != "" {
				n.ApprovalURL = strings.TrimSuffix(cfg.Page.URL, "/") + approvalpage.Prefix + "/" + url.PathEscape(n.ExecutionID)
			}
			if cfg.OnSuspend != nil {
				cfg.OnSuspend(ctx, n)
			}
			tools := make([]string, len(n.Pending))
			for i, p := range n.Pending {
				tools[i] = p.Tool
			}
			log.InfoContext(ctx, "execution suspended", "execution_id", n.ExecutionID, "principal", n.Principal,
				"pending", tools, "expires_at", n.ExpiresAt.Format(time.RFC3339), "approval_url", n.ApprovalURL)
			put(ctx, NoticeDetailType, n, "execution_id", n.ExecutionID)
		},
		drafted: func(ctx context.Context, n capability.DraftNotice) {
			// A draft's page is under the executions' route, by its id.
			if cfg.Page.URL != "" {
				n.ApprovalURL = strings.TrimSuffix(cfg.Page.URL, "/") + approvalpage.Prefix + "/" + url.PathEscape(n.DraftID)
			}
			if cfg.OnDraft != nil {
				cfg.OnDraft(ctx, n)
			}
			log.InfoContext(ctx, "capability draft proposed", "draft_id", n.DraftID, "name", n.Name, "author", n.Author,
				"code_hash", n.CodeHash, "expires_at", n.ExpiresAt.Format(time.RFC3339), "approval_url", n.ApprovalURL)
			put(ctx, DraftDetailType, n, "draft_id", n.DraftID)
		},
	}, nil
}

// secretString reads a Secrets Manager secret's string.
func (a *App) secretString(ctx context.Context, id string) (string, error) {
	sm, err := a.aws.secrets(ctx)
	if err != nil {
		return "", err
	}
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("reading secret %s: %w", id, err)
	}
	return aws.ToString(out.SecretString), nil
}
