// Command echofn is a test Lambda function: it answers {"echo": payload,
// "request_id": ..., "trace_id": ...}, fails when asked, and sleeps when
// asked, so the emulator's concurrency can be observed. "wrapped" shows
// $LAMBDAEMU_WRAPPED, which a test's Function.Wrapper sets. It streams its
// answer when asked (each of "stream" every "every_ms", failing after them
// with "stream_fail"), exits mid-invocation with "exit", and appends a line
// to the file "log_to" names on every invocation, so deliveries can be
// counted.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type in struct {
	Fail       bool     `json:"fail"`
	SleepMS    int      `json:"sleep_ms"`
	Stream     []string `json:"stream"`
	EveryMS    int      `json:"every_ms"`
	StreamFail bool     `json:"stream_fail"`
	Exit       bool     `json:"exit"`
	LogTo      string   `json:"log_to"`
}

func main() {
	lambda.Start(func(ctx context.Context, raw json.RawMessage) (any, error) {
		var p in
		_ = json.Unmarshal(raw, &p)
		lc, _ := lambdacontext.FromContext(ctx)
		if p.LogTo != "" {
			f, err := os.OpenFile(p.LogTo, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				_, _ = f.WriteString(lc.AwsRequestID + "\n")
				f.Close()
			}
		}
		if p.Exit {
			os.Exit(3)
		}
		if p.Fail {
			return nil, errors.New("asked to fail")
		}
		time.Sleep(time.Duration(p.SleepMS) * time.Millisecond)
		if p.Stream != nil {
			r, w := io.Pipe()
			go func() {
				for _, part := range p.Stream {
					_, _ = w.Write([]byte(part))
					time.Sleep(time.Duration(p.EveryMS) * time.Millisecond)
				}
				if p.StreamFail {
					w.CloseWithError(errors.New("failed mid-stream"))
					return
				}
				w.Close()
			}()
			return r, nil
		}
		return map[string]any{"echo": raw, "request_id": lc.AwsRequestID, "pid": os.Getpid(),
			"trace_env": os.Getenv("_X_AMZN_TRACE_ID"), "function": lambdacontext.FunctionName,
			"wrapped": os.Getenv("LAMBDAEMU_WRAPPED")}, nil
	})
}
