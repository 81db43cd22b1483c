package lambdaevents_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzHandler feeds arbitrary payloads to the Lambda handler: whatever
// arrives, it answers with a response or an error, never a panic. The seeds
// are the recorded events; `go test -fuzz FuzzHandler` explores from there.
func FuzzHandler(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"version":"2.0","routeKey":"x","rawPath":"/execute","body":"{\"code\":1}","isBase64Encoded":true}`))
	f.Add([]byte(`{"Records":[{"eventSource":"aws:sqs","body":"{}"}]}`))
	f.Add([]byte(`{"detail-type":"Execute","detail":"not an object"}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		out, err := handler(ctx, json.RawMessage(payload))
		if err == nil && out == nil {
			t.Fatalf("no answer and no error for %q", payload)
		}
	})
}
