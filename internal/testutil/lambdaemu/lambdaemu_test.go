package lambdaemu_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/pml-sandbox/pml/internal/sdkhttp"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
)

func buildEcho(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/echofn")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestInvokeThroughTheSDK(t *testing.T) {
	emu, err := lambdaemu.Start(lambdaemu.Function{Name: "echo", Binary: buildEcho(t), MaxConcurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	client := sdkClient(emu)
	ctx := context.Background()

	out, err := client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("echo"), Payload: []byte(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Echo      json.RawMessage `json:"echo"`
		RequestID string          `json:"request_id"`
		Function  string          `json:"function"`
	}
	if err := json.Unmarshal(out.Payload, &got); err != nil || string(got.Echo) != `{"x":1}` || got.RequestID == "" || got.Function != "echo" {
		t.Fatalf("payload %s (%v)", out.Payload, err)
	}
	if out.FunctionError != nil {
		t.Fatalf("unexpected function error %q", *out.FunctionError)
	}

	out, err = client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("echo"), Payload: []byte(`{"fail":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if out.FunctionError == nil || !json.Valid(out.Payload) {
		t.Fatalf("a failing function must report FunctionError with a JSON body: %s", out.Payload)
	}

	if _, err := client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("missing"), Payload: []byte(`{}`)}); err == nil {
		t.Fatal("invoking an unknown function succeeded")
	}

	// Concurrent invocations scale out to more processes, like Lambda.
	var wg sync.WaitGroup
	pids := sync.Map{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("echo"), Payload: []byte(`{"sleep_ms":300}`)})
			if err != nil {
				t.Error(err)
				return
			}
			var v struct{ PID int }
			_ = json.Unmarshal(out.Payload, &v)
			pids.Store(v.PID, true)
		}()
	}
	wg.Wait()
	n := 0
	pids.Range(func(any, any) bool { n++; return true })
	if n < 2 {
		t.Fatalf("4 concurrent 300 ms invocations ran in %d process(es)", n)
	}
}

func TestWrapper(t *testing.T) {
	tests := []struct {
		name    string
		wrapper []string
		want    string
	}{
		{"none", nil, ""},
		{"env", []string{"env", "LAMBDAEMU_WRAPPED=yes"}, "yes"},
	}
	bin := buildEcho(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			emu, err := lambdaemu.Start(lambdaemu.Function{Name: "echo", Binary: bin, Wrapper: tt.wrapper})
			if err != nil {
				t.Fatal(err)
			}
			defer emu.Close()
			out, fnErr, err := emu.Invoke(context.Background(), "echo", []byte(`{}`))
			if err != nil || fnErr {
				t.Fatalf("%s %v %v", out, fnErr, err)
			}
			var got struct{ Wrapped string }
			if err := json.Unmarshal(out, &got); err != nil || got.Wrapped != tt.want {
				t.Fatalf("wrapped = %q (%v), want %q: %s", got.Wrapped, err, tt.want, out)
			}
			if d := emu.CPUTime(); d != 0 {
				t.Errorf("CPU time %v counted for a process still running", d)
			}
			emu.Close()
			if d := emu.CPUTime(); d <= 0 {
				t.Errorf("CPU time %v after Close", d)
			}
		})
	}
}

// TestRecycle: after Recycle, the next invocation runs in a fresh process.
func TestRecycle(t *testing.T) {
	emu, err := lambdaemu.Start(lambdaemu.Function{Name: "echo", Binary: buildEcho(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	pid := func() int {
		t.Helper()
		out, fnErr, err := emu.Invoke(context.Background(), "echo", []byte(`{}`))
		if err != nil || fnErr {
			t.Fatalf("%s %v %v", out, fnErr, err)
		}
		var v struct{ PID int }
		if err := json.Unmarshal(out, &v); err != nil || v.PID == 0 {
			t.Fatalf("no pid in %s", out)
		}
		return v.PID
	}
	first := pid()
	// (A second process may have started meanwhile: the emulator starts
	// one when none is waiting at the moment of an invocation.)
	if n, err := emu.Recycle("echo"); err != nil || n < 1 {
		t.Fatalf("Recycle stopped %d (%v), want at least 1", n, err)
	}
	if fresh := pid(); fresh == first {
		t.Fatalf("after Recycle the same process %d answered", fresh)
	}
	if _, err := emu.Recycle("missing"); err == nil {
		t.Fatal("recycling an unknown function succeeded")
	}
}

func sdkClient(emu *lambdaemu.Emulator) *lambda.Client {
	return lambda.New(lambda.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(emu.Endpoint()),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   sdkhttp.New(nil),
	})
}

// TestStreamedThroughTheSDK: InvokeWithResponseStream, read by the AWS
// SDK's own event stream decoder, delivers the function's writes as they
// are made (the first chunk well before the last is written), then
// InvokeComplete; a failure mid-stream comes in InvokeComplete.
func TestStreamedThroughTheSDK(t *testing.T) {
	emu, err := lambdaemu.Start(lambdaemu.Function{Name: "echo", Binary: buildEcho(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	client := sdkClient(emu)
	ctx := context.Background()
	read := func(payload string) (chunks []string, at []time.Time, complete *types.InvokeWithResponseStreamCompleteEvent) {
		t.Helper()
		out, err := client.InvokeWithResponseStream(ctx, &lambda.InvokeWithResponseStreamInput{
			FunctionName: aws.String("echo"), Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		stream := out.GetStream()
		defer stream.Close()
		for ev := range stream.Events() {
			switch v := ev.(type) {
			case *types.InvokeWithResponseStreamResponseEventMemberPayloadChunk:
				chunks = append(chunks, string(v.Value.Payload))
				at = append(at, time.Now())
			case *types.InvokeWithResponseStreamResponseEventMemberInvokeComplete:
				c := v.Value
				complete = &c
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		return chunks, at, complete
	}
	chunks, at, complete := read(`{"stream": ["one ", "two ", "three"], "every_ms": 300}`)
	if got := strings.Join(chunks, ""); got != "one two three" {
		t.Fatalf("streamed %q", got)
	}
	if complete == nil || complete.ErrorCode != nil {
		t.Fatalf("complete %+v", complete)
	}
	if spread := at[len(at)-1].Sub(at[0]); spread < 400*time.Millisecond {
		t.Fatalf("the chunks arrived within %v of each other: held back, not streamed", spread)
	}
	_, _, complete = read(`{"stream": ["a", "b"], "every_ms": 10, "stream_fail": true}`)
	if complete == nil || complete.ErrorCode == nil || !strings.Contains(aws.ToString(complete.ErrorDetails), "failed mid-stream") {
		t.Fatalf("a failure mid-stream: %+v", complete)
	}
}

// TestAsyncInvocations: an Event invocation is accepted at once, retried
// when it fails (and when its process dies), delivered again when asked to
// duplicate.
func TestAsyncInvocations(t *testing.T) {
	bin := buildEcho(t)
	lines := func(path string) int {
		b, _ := os.ReadFile(path)
		return strings.Count(string(b), "\n")
	}
	tests := []struct {
		name    string
		fn      lambdaemu.Function
		payload string
		want    int
	}{
		{"once", lambdaemu.Function{}, `{}`, 1},
		{"failed, retried twice", lambdaemu.Function{}, `{"fail": true}`, 3},
		{"died, retried", lambdaemu.Function{AsyncRetries: 1}, `{"exit": true}`, 2},
		{"no retries", lambdaemu.Function{AsyncRetries: -1}, `{"fail": true}`, 1},
		{"duplicated", lambdaemu.Function{AsyncDuplicates: 1}, `{}`, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fn := tc.fn
			fn.Name, fn.Binary, fn.AsyncRetryDelay = "echo", bin, 10*time.Millisecond
			emu, err := lambdaemu.Start(fn)
			if err != nil {
				t.Fatal(err)
			}
			defer emu.Close()
			log := filepath.Join(t.TempDir(), "deliveries")
			var p map[string]any
			_ = json.Unmarshal([]byte(tc.payload), &p)
			p["log_to"] = log
			payload, _ := json.Marshal(p)
			out, err := sdkClient(emu).Invoke(context.Background(), &lambda.InvokeInput{FunctionName: aws.String("echo"),
				InvocationType: types.InvocationTypeEvent, Payload: payload})
			if err != nil || out.StatusCode != 202 {
				t.Fatalf("%+v %v", out, err)
			}
			deliveries := 1 + fn.AsyncDuplicates
			for deadline := time.Now().Add(20 * time.Second); emu.AsyncDone("echo") < deliveries && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if got := lines(log); got != tc.want || emu.AsyncDone("echo") != deliveries {
				t.Fatalf("%d deliveries ran, want %d (%d done)", got, tc.want, emu.AsyncDone("echo"))
			}
		})
	}
}

// TestProcessDeath: an invocation whose process dies fails, as on Lambda.
func TestProcessDeath(t *testing.T) {
	emu, err := lambdaemu.Start(lambdaemu.Function{Name: "echo", Binary: buildEcho(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	out, fnErr, err := emu.Invoke(context.Background(), "echo", []byte(`{"exit": true}`))
	if err != nil || !fnErr || !strings.Contains(string(out), "Runtime.ExitError") {
		t.Fatalf("%s %v %v", out, fnErr, err)
	}
	if out, fnErr, err := emu.Invoke(context.Background(), "echo", []byte(`{}`)); err != nil || fnErr {
		t.Fatalf("after a death: %s %v %v", out, fnErr, err)
	}
}

// TestProcessDiesBeforeTakingWork: a process that exits before it asks
// for work (as a runtime does when its first request is refused) is
// replaced, and the invocation it was started for is answered instead of
// waiting out the function's timeout (the fresh-clone CI failure of
// TestInvokeThroughTheSDK, "Task timed out after 30.00 seconds").
func TestProcessDiesBeforeTakingWork(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started-once")
	emu, err := lambdaemu.Start(lambdaemu.Function{
		Name: "echo", Binary: buildEcho(t), MaxConcurrency: 1, Timeout: 20 * time.Second,
		// The first process dies at once; later ones run the function.
		Wrapper: []string{"sh", "-c", `if [ ! -e "$1" ]; then : > "$1"; exit 3; fi; exec "$2"`, "", marker},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, fnErr, err := emu.Invoke(ctx, "echo", []byte(`{"x":1}`))
	if err != nil || fnErr || !strings.Contains(string(out), `"echo":{"x":1}`) {
		t.Fatalf("invocation after a process died at start: %s fnErr=%v err=%v", out, fnErr, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the first process never ran: %v", err)
	}
}
