package approval

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// State is what an MCP client carries between an elicitation and its
// answer (the requestState of an input_required result): the suspended
// execution the question is about, the version of its stored state, the
// principal it was asked for and the calls it asks about — or the
// capability draft it asks to publish. It is sealed with the deployment's
// key, so a client can neither read it as anything but opaque nor change
// it, and it names one version (one pending draft), so once that version
// has been resumed (the draft closed) the same state is refused
// (CONFLICT): no replay.
type State struct {
	ExecutionID string `json:"e,omitempty"`
	Version     int    `json:"v,omitempty"`
	Principal   string `json:"p"`
	Calls       []int  `json:"c,omitempty"`
	// Draft is the capability draft the question asks to publish (then
	// ExecutionID is empty).
	Draft string `json:"d,omitempty"`
	// Expires is when the suspended execution expires (Unix seconds).
	Expires int64 `json:"x"`
	// Page is set when the person was sent to the approval page
	// (URL-mode elicitation) rather than asked in a form: the answer to
	// such a question decides nothing, the page's decisions do.
	Page bool `json:"u,omitempty"`
}

// KeyBytes is the size of a state key.
const KeyBytes = 32

// Key seals and opens States (HMAC-SHA-256).
type Key []byte

// Errors of Key.Open.
var (
	// ErrTampered: the state was not sealed with this key, or was changed.
	ErrTampered = errors.New("the request state is not one this deployment sealed, or was changed")
	// ErrStateExpired: the execution it names has expired.
	ErrStateExpired = errors.New("the request state has expired")
)

// stateVersion prefixes sealed states, so the format can change.
const stateVersion = "s1"

// Seal returns s as an opaque, tamper-proof string.
func (k Key) Seal(s State) (string, error) {
	if len(k) < KeyBytes {
		return "", errors.New("approval: no state key configured")
	}
	body, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	payload := stateVersion + "." + base64.RawURLEncoding.EncodeToString(body)
	return payload + "." + base64.RawURLEncoding.EncodeToString(k.mac(payload)), nil
}

// Open checks a sealed state and returns it: ErrTampered for anything this
// key did not seal whole, ErrStateExpired once it has expired at now.
func (k Key) Open(token string, now time.Time) (State, error) {
	if len(k) < KeyBytes {
		return State{}, errors.New("approval: no state key configured")
	}
	i := strings.LastIndexByte(token, '.')
	if i < 0 || !strings.HasPrefix(token, stateVersion+".") {
		return State{}, ErrTampered
	}
	payload, sig := token[:i], token[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.mac(payload)) {
		return State{}, ErrTampered
	}
	body, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(payload, stateVersion+"."))
	if err != nil {
		return State{}, ErrTampered
	}
	var s State
	if err := json.Unmarshal(body, &s); err != nil || (s.ExecutionID == "") == (s.Draft == "") {
		return State{}, ErrTampered
	}
	if now.Unix() >= s.Expires {
		return State{}, ErrStateExpired
	}
	return s, nil
}

func (k Key) mac(payload string) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// ParseKey reads a key as stored (base64 of at least KeyBytes bytes; the
// secret the template generates, or the file LoadKeyFile writes).
func ParseKey(s string) (Key, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("the approval state key is not base64: %w", err)
	}
	if len(b) < KeyBytes {
		return nil, fmt.Errorf("the approval state key is %d bytes; want at least %d", len(b), KeyBytes)
	}
	return Key(b), nil
}

// LoadKeyFile reads the key in path, creating it (mode 0600, in a 0700
// directory) with a random key when it does not exist: a local deployment
// needs no set-up, and the key outlives the process, so a question asked
// before a restart can still be answered after it.
func LoadKeyFile(path string) (Key, error) {
	if b, err := os.ReadFile(path); err == nil {
		return ParseKey(string(b))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	k := make([]byte, KeyBytes)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	// Written whole to a temporary file, then linked into place: a
	// process reading the key never sees half of it, and of two processes
	// creating it at once the second finds the first's and uses it.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".approval-key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	if err := errors.Join(werr, tmp.Chmod(0o600), tmp.Sync(), tmp.Close()); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		return LoadKeyFile(path)
	} else if err != nil {
		return nil, err
	}
	return Key(k), nil
}
