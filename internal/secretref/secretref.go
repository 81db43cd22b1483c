// Package secretref resolves the secret references a server
// configuration's credentials may hold instead of the secrets themselves:
//
//	${env:NAME}              an environment variable
//	${file:/absolute/path}   a file's content, trailing line breaks cut
//	${secret:ARN-or-name}    an AWS Secrets Manager secret's string
//	${secret:ARN-or-name#key} the string at key of a secret holding a
//	                          JSON object
//
// One syntax and one Resolver serve every tool source that takes
// credentials (MCP servers' headers and OAuth client secrets, OpenAPI
// services' headers and query values). A Resolver reads a Secrets Manager
// secret through the process's one client, keeps it for a bounded time
// (DefaultTTL), and reads it again sooner when a server refuses the
// credentials (Refresh: the secret may have been rotated). Errors name
// the reference, never a value; callers hand every resolved value to
// their redactor before it can be sent, so a server or library quoting it
// back is masked.
package secretref

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"golang.org/x/sync/singleflight"
)

// DefaultTTL is how long a Secrets Manager secret is used before it is
// read again: short enough that a rotation is picked up without a
// refused request, long enough that calls do not each cost a read.
const DefaultTTL = 5 * time.Minute

// API is what a Resolver calls on AWS Secrets Manager, and so exactly
// what a deployment must let its functions do on the referenced secrets
// (the template's ToolSecretArns statement; internal/samcheck pins it).
type API interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// ref matches one reference.
var ref = regexp.MustCompile(`\$\{(env|file|secret):([^}]*)\}`)

// Has reports whether v holds a reference (a value without one is itself
// the secret, and must be masked as written).
func Has(v string) bool { return ref.MatchString(v) }

// HasSecret reports whether v holds a Secrets Manager reference.
func HasSecret(v string) bool {
	for _, m := range ref.FindAllStringSubmatch(v, -1) {
		if m[1] == "secret" {
			return true
		}
	}
	return false
}

// Check reports a malformed reference in v (an empty name, a relative
// file path, a secret with an empty key), without resolving anything.
func Check(v string) error {
	for _, m := range ref.FindAllStringSubmatch(v, -1) {
		if m[2] == "" {
			return fmt.Errorf("empty ${%s:} reference", m[1])
		}
		switch m[1] {
		case "file":
			if !filepath.IsAbs(m[2]) {
				return fmt.Errorf("${file:%s}: path must be absolute", m[2])
			}
		case "secret":
			id, key, hasKey := strings.Cut(m[2], "#")
			if id == "" || (hasKey && key == "") {
				return fmt.Errorf("${secret:%s}: want ${secret:ARN-or-name} or ${secret:ARN-or-name#key}", m[2])
			}
		}
	}
	return nil
}

// Resolver resolves references. The zero value is not usable; New makes
// one. It is safe for concurrent use.
type Resolver struct {
	client func(context.Context) (API, error)
	ttl    time.Duration
	now    func() time.Time

	loads singleflight.Group
	mu    sync.Mutex
	cache map[string]*entry // by secret id (ARN or name, as referenced)
}

// entry is a secret read from Secrets Manager.
type entry struct {
	value   string
	fetched time.Time
	// confirmed: a Refresh read it again and found it unchanged; another
	// Refresh before it expires reads nothing (a server that refuses a
	// secret that was not rotated must not cost a read per request).
	confirmed bool
}

// Options configure a Resolver.
type Options struct {
	// TTL is how long a secret is kept (DefaultTTL when 0).
	TTL time.Duration
	// Now is the clock (tests; time.Now when nil).
	Now func() time.Time
}

// New returns a Resolver reading secrets through the client client
// returns, made when the first ${secret:} is resolved; client may be nil
// where there is no AWS (a ${secret:} then fails to resolve).
func New(client func(context.Context) (API, error), o Options) *Resolver {
	r := &Resolver{ttl: o.TTL, now: o.Now, cache: map[string]*entry{}}
	if r.ttl <= 0 {
		r.ttl = DefaultTTL
	}
	if r.now == nil {
		r.now = time.Now
	}
	if client != nil {
		get := sync.OnceValues(func() (API, error) { return client(context.Background()) })
		r.client = func(context.Context) (API, error) { return get() }
	}
	return r
}

// Resolve substitutes the references in v; what names v in errors, which
// never quote a value.
func (r *Resolver) Resolve(ctx context.Context, what, v string) (string, error) {
	if !ref.MatchString(v) {
		return v, nil
	}
	var firstErr error
	out := ref.ReplaceAllStringFunc(v, func(s string) string {
		if firstErr != nil {
			return ""
		}
		m := ref.FindStringSubmatch(s)
		val, err := r.resolveOne(ctx, m[1], m[2])
		if err != nil {
			firstErr = fmt.Errorf("%s: %w", what, err)
		}
		return val
	})
	if firstErr != nil {
		return "", firstErr
	}
	return out, nil
}

func (r *Resolver) resolveOne(ctx context.Context, kind, name string) (string, error) {
	switch kind {
	case "env":
		val, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		return val, nil
	case "file":
		data, err := os.ReadFile(name)
		if err != nil {
			// The path is configuration, not a secret; the OS error
			// says why without quoting the contents.
			return "", fmt.Errorf("secret file: %w", err)
		}
		return strings.TrimRight(string(data), "\r\n"), nil
	}
	id, key, hasKey := strings.Cut(name, "#")
	val, err := r.secret(ctx, id, false)
	if err != nil {
		return "", err
	}
	if !hasKey {
		return val, nil
	}
	return field(id, key, val)
}

// field is key's value in a secret holding a JSON object: a string as it
// is, any other value as its JSON text.
func field(id, key, val string) (string, error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(val), &obj) != nil {
		// The decoder's error would quote the secret.
		return "", fmt.Errorf("secret %s does not hold a JSON object, so it has no key %q", id, key)
	}
	raw, ok := obj[key]
	if !ok {
		return "", fmt.Errorf("secret %s has no key %q", id, key)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	return string(raw), nil
}

// secret is id's string: from the cache while it is fresh (unless force),
// else read once however many ask at the same time.
func (r *Resolver) secret(ctx context.Context, id string, force bool) (string, error) {
	if !force {
		r.mu.Lock()
		e := r.cache[id]
		r.mu.Unlock()
		if e != nil && r.now().Sub(e.fetched) < r.ttl {
			return e.value, nil
		}
	}
	key := id
	if force {
		key = "force\x00" + id
	}
	v, err, _ := r.loads.Do(key, func() (any, error) {
		val, err := r.read(context.WithoutCancel(ctx), id)
		if err != nil {
			return "", err
		}
		r.mu.Lock()
		old := r.cache[id]
		r.cache[id] = &entry{value: val, fetched: r.now(), confirmed: force && old != nil && old.value == val}
		r.mu.Unlock()
		return val, nil
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

// readTimeout bounds one GetSecretValue.
const readTimeout = 15 * time.Second

func (r *Resolver) read(ctx context.Context, id string) (string, error) {
	if r.client == nil {
		return "", fmt.Errorf("${secret:%s}: no AWS Secrets Manager client is configured", id)
	}
	api, err := r.client(ctx)
	if err != nil {
		return "", fmt.Errorf("secrets manager: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("reading secret %s: %w", id, err)
	}
	if out.SecretString == nil {
		return "", fmt.Errorf("secret %s holds no string (a binary secret cannot be a header or query value)", id)
	}
	return *out.SecretString, nil
}

// Refresh reads again the Secrets Manager secrets v references, after a
// server refused the credentials v resolved to (HTTP 401 or 403): the
// secret may have been rotated since it was read. It reports whether any
// of them changed, in which case resolving v again gives the new
// credentials, worth one more try. A secret that a Refresh already found
// unchanged is not read again until it expires, so a server that keeps
// refusing costs one read per secret per TTL, not one per request.
func (r *Resolver) Refresh(ctx context.Context, vs ...string) (changed bool, err error) {
	seen := map[string]bool{}
	var errs []error
	for _, v := range vs {
		for _, m := range ref.FindAllStringSubmatch(v, -1) {
			if m[1] != "secret" {
				continue
			}
			id, _, _ := strings.Cut(m[2], "#")
			if seen[id] {
				continue
			}
			seen[id] = true
			r.mu.Lock()
			old := r.cache[id]
			r.mu.Unlock()
			if old != nil && old.confirmed && r.now().Sub(old.fetched) < r.ttl {
				continue
			}
			val, err := r.secret(ctx, id, true)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if old == nil || old.value != val {
				changed = true
			}
		}
	}
	return changed, errors.Join(errs...)
}
