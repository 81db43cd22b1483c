package suspend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/atomicfile"
)

// PageSessions keeps the approval page's sessions on the server: a small
// value under an opaque key (the page keeps a hash of its cookie there,
// never the cookie), until it expires or is deleted (a sign-out). They
// live beside the suspensions — the same DynamoDB table (partition
// PAGE#<key>) or a directory of their own — so every process and Lambda
// container that serves the page reads the same sessions, and a sign-out
// in one holds in all at once. Safe for concurrent use.
type PageSessions interface {
	// Put stores value under key until expires (replacing any).
	Put(ctx context.Context, key string, value []byte, expires time.Time) error
	// Get returns key's value; false when there is none, or it expired
	// or was deleted.
	Get(ctx context.Context, key string) ([]byte, bool, error)
	// Delete removes key's value; no error when there is none.
	Delete(ctx context.Context, key string) error
}

// MaxPageSessionBytes bounds a page session's value.
const MaxPageSessionBytes = 4 << 10

// pageSessionPrefix is the partition key prefix of page sessions.
const pageSessionPrefix = "PAGE#"

func checkPageSession(key string, value []byte) error {
	if !validID(key) {
		return fmt.Errorf("suspend: page session key %q: %w", key, ErrInvalid)
	}
	if len(value) > MaxPageSessionBytes {
		return fmt.Errorf("suspend: a page session of %d bytes exceeds %d: %w", len(value), MaxPageSessionBytes, ErrInvalid)
	}
	return nil
}

// NewFilePageSessions keeps page sessions in dir, one file each
// (<key>.json, written atomically, private to the user). Storing one
// sweeps the directory of expired ones, at most hourly.
func NewFilePageSessions(dir string, opts Options) PageSessions {
	return &filePageSessions{dir: dir, opts: opts.withDefaults()}
}

type filePageSessions struct {
	dir  string
	opts Options

	mu        sync.Mutex
	lastSweep time.Time
}

// pageSessionFile is a page session as its file holds it.
type pageSessionFile struct {
	Value   []byte    `json:"value"`
	Expires time.Time `json:"expires"`
}

func (f *filePageSessions) path(key string) string { return filepath.Join(f.dir, key+".json") }

func (f *filePageSessions) Put(_ context.Context, key string, value []byte, expires time.Time) error {
	if err := checkPageSession(key, value); err != nil {
		return err
	}
	data, err := json.Marshal(pageSessionFile{Value: value, Expires: expires.UTC()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("suspend: storing a page session: %w", err)
	}
	if err := atomicfile.Write(f.path(key), data); err != nil {
		return fmt.Errorf("suspend: storing a page session: %w", err)
	}
	f.sweep()
	return nil
}

func (f *filePageSessions) Get(_ context.Context, key string) ([]byte, bool, error) {
	if !validID(key) {
		return nil, false, nil
	}
	data, err := os.ReadFile(f.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("suspend: reading a page session: %w", err)
	}
	var s pageSessionFile
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, false, fmt.Errorf("suspend: page session %s is corrupt: %w", key, err)
	}
	if !f.opts.Now().Before(s.Expires) {
		return nil, false, nil
	}
	return s.Value, true, nil
}

func (f *filePageSessions) Delete(_ context.Context, key string) error {
	if !validID(key) {
		return nil
	}
	if err := os.Remove(f.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("suspend: deleting a page session: %w", err)
	}
	return nil
}

// sweep removes expired sessions (and temporary files a crash left),
// at most every sweepEvery. Errors are ignored: the next sweep tries
// again, and an expired session is refused whether or not it is gone.
func (f *filePageSessions) sweep() {
	now := f.opts.Now()
	f.mu.Lock()
	due := f.lastSweep.IsZero() || now.Sub(f.lastSweep) >= sweepEvery
	if due {
		f.lastSweep = now
	}
	f.mu.Unlock()
	if !due {
		return
	}
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if atomicfile.IsTemp(name) {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > ttlGrace {
				_ = os.Remove(filepath.Join(f.dir, name))
			}
			continue
		}
		key, ok := strings.CutSuffix(name, ".json")
		if !ok {
			continue
		}
		data, err := os.ReadFile(filepath.Join(f.dir, name))
		var s pageSessionFile
		if err == nil && json.Unmarshal(data, &s) == nil && !now.Before(s.Expires) {
			_ = f.Delete(context.Background(), key)
		}
	}
}

// NewDynamoPageSessions keeps page sessions in the suspensions' table:
//
//	pk PAGE#<key>  sk meta   value (binary), expires (Unix ms), ttl
//
// Reads are consistent, so a sign-out in one container holds in the next
// request to any other; DynamoDB's TTL removes expired items eventually,
// and expires decides meanwhile.
func NewDynamoPageSessions(db DynamoAPI, table string, opts Options) PageSessions {
	return &dynamoPageSessions{b: &dynamoBackend{db: db, table: table, prefix: pageSessionPrefix}, opts: opts.withDefaults()}
}

type dynamoPageSessions struct {
	b    *dynamoBackend
	opts Options
}

func (d *dynamoPageSessions) Put(ctx context.Context, key string, value []byte, expires time.Time) error {
	if err := checkPageSession(key, value); err != nil {
		return err
	}
	item := d.b.itemKey(key, "meta")
	item["value"] = &types.AttributeValueMemberB{Value: value}
	item["expires"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.UnixMilli(), 10)}
	item["ttl"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.Add(ttlGrace).Unix(), 10)}
	if _, err := d.b.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.b.table), Item: item}); err != nil {
		return fmt.Errorf("suspend: storing a page session: %w", err)
	}
	return nil
}

func (d *dynamoPageSessions) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if !validID(key) {
		return nil, false, nil
	}
	out, err := d.b.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.b.table), Key: d.b.itemKey(key, "meta"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, false, fmt.Errorf("suspend: reading a page session: %w", err)
	}
	v, ok1 := out.Item["value"].(*types.AttributeValueMemberB)
	x, ok2 := out.Item["expires"].(*types.AttributeValueMemberN)
	if !ok1 || !ok2 {
		return nil, false, nil
	}
	ms, err := strconv.ParseInt(x.Value, 10, 64)
	if err != nil || !d.opts.Now().Before(time.UnixMilli(ms)) {
		return nil, false, nil
	}
	return v.Value, true, nil
}

func (d *dynamoPageSessions) Delete(ctx context.Context, key string) error {
	if !validID(key) {
		return nil
	}
	if err := d.b.batchWrite(ctx, []types.WriteRequest{{DeleteRequest: &types.DeleteRequest{Key: d.b.itemKey(key, "meta")}}}); err != nil {
		return fmt.Errorf("suspend: deleting a page session: %w", err)
	}
	return nil
}
