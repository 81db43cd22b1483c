package xraysink

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// InstrumentAWS makes the AWS SDK clients built from cfg record their calls
// (DynamoDB writes, capability invocations) as X-Ray subsegments of the
// Lambda invocation's segment, and pass the trace on in each request's
// X-Amzn-Trace-Id header, as aws-xray-sdk-go's awsv2 middleware did.
// Outside a traced invocation it stays silent.
func InstrumentAWS(cfg *aws.Config) {
	em, err := newEmitter()
	if err != nil {
		return // no daemon address to send to: nothing to record
	}
	m := awsCalls{em: em}
	cfg.APIOptions = append(cfg.APIOptions, func(st *middleware.Stack) error {
		// After the service's metadata is in the context (the Initialize
		// step's own middleware), around retries, signing and sending.
		if err := st.Initialize.Add(m, middleware.After); err != nil {
			return err
		}
		return st.Deserialize.Add(propagate{}, middleware.Before)
	})
}

// lambdaTraceKey is the context key under which aws-lambda-go keeps the
// invocation's trace header.
const lambdaTraceKey = "x-amzn-trace-id"

type awsCalls struct{ em *emitter }

type callKey struct{}

func (awsCalls) ID() string { return "PMLXRayAWSCall" }

// HandleInitialize times one AWS call and emits its subsegment.
func (m awsCalls) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	raw, _ := ctx.Value(lambdaTraceKey).(string)
	h := parseHeader(raw)
	if raw == "" || h.notSampled || h.traceID == "" || h.parentID == "" {
		return next.HandleInitialize(ctx, in)
	}
	d := &document{
		ID: newSegmentID(), TraceID: h.traceID, ParentID: h.parentID, Type: "subsegment",
		Name: awsmiddleware.GetServiceID(ctx), Namespace: "aws", StartTime: seconds(time.Now()),
		AWS: map[string]any{"region": awsmiddleware.GetRegion(ctx), "operation": awsmiddleware.GetOperationName(ctx)},
	}
	out, md, err := next.HandleInitialize(context.WithValue(ctx, callKey{}, d), in)
	d.EndTime = seconds(time.Now())
	if id, ok := awsmiddleware.GetRequestIDMetadata(md); ok {
		d.AWS["request_id"] = id
	}
	status := 0
	if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok && resp != nil {
		status = resp.StatusCode
	} else if re := (*smithyhttp.ResponseError)(nil); errors.As(err, &re) && re.Response != nil {
		status = re.Response.StatusCode
	}
	if status != 0 {
		d.HTTP = &httpInfo{}
		d.HTTP.Response.Status = status
	}
	classify(d, status, err)
	m.em.emit(d)
	return out, md, err
}

// classify marks d as X-Ray does: 429 a throttle (and an error), other 4xx
// an error, 5xx or a failure without a response a fault.
func classify(d *document, status int, err error) {
	switch {
	case status == 429:
		d.Throttle, d.Error = true, true
	case status >= 500:
		d.Fault = true
	case status >= 400:
		d.Error = true
	case err != nil:
		var ce *smithy.CanceledError
		d.Fault = !errors.As(err, &ce)
		d.Error = !d.Fault
	}
}

// propagate passes the trace on to the service (a capability's Lambda
// invocation continues it).
type propagate struct{}

func (propagate) ID() string { return "PMLXRayPropagate" }

func (propagate) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	if d, ok := ctx.Value(callKey{}).(*document); ok {
		if req, ok := in.Request.(*smithyhttp.Request); ok {
			req.Header.Set("X-Amzn-Trace-Id", "Root="+d.TraceID+";Parent="+d.ID+";Sampled=1")
		}
	}
	return next.HandleDeserialize(ctx, in)
}
