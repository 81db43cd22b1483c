// Command echofn is a test Lambda function: it answers {"echo": payload,
// "request_id": ..., "trace_id": ...}, fails when asked, and sleeps when
// asked, so the emulator's concurrency can be observed. "wrapped" shows
// $LAMBDAEMU_WRAPPED, which a test's Function.Wrapper sets.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type in struct {
	Fail    bool `json:"fail"`
	SleepMS int  `json:"sleep_ms"`
}

func main() {
	lambda.Start(func(ctx context.Context, raw json.RawMessage) (any, error) {
		var p in
		_ = json.Unmarshal(raw, &p)
		if p.Fail {
			return nil, errors.New("asked to fail")
		}
		time.Sleep(time.Duration(p.SleepMS) * time.Millisecond)
		lc, _ := lambdacontext.FromContext(ctx)
		return map[string]any{"echo": raw, "request_id": lc.AwsRequestID, "pid": os.Getpid(),
			"trace_env": os.Getenv("_X_AMZN_TRACE_ID"), "function": lambdacontext.FunctionName,
			"wrapped": os.Getenv("LAMBDAEMU_WRAPPED")}, nil
	})
}
