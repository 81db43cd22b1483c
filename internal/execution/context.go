package execution

import "context"

// A front end that hands a request to another (the Lambda adapter feeds
// API Gateway events to the HTTP handler) says who is calling and through
// what in the request's context: what API Gateway verified, never
// anything the caller wrote.

type principalKey struct{}

// WithPrincipal records who is calling, as authenticated in front of the
// handler (the IAM or JWT principal API Gateway verified). An execution
// that suspends keeps it, and only the same principal may resume it or
// read its trace. No header sets it: `pml serve` has one shared token at
// most, so its principal is "".
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalFrom returns the principal set by WithPrincipal, "" when none.
func PrincipalFrom(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

type sourceKey struct{}

// WithSource records which front end a request came through.
func WithSource(ctx context.Context, s Source) context.Context {
	return context.WithValue(ctx, sourceKey{}, s)
}

// SourceFrom returns the source set by WithSource, or def.
func SourceFrom(ctx context.Context, def Source) Source {
	if s, ok := ctx.Value(sourceKey{}).(Source); ok && s != "" {
		return s
	}
	return def
}

// TraceHeader returns the X-Ray trace header of the Lambda invocation in
// ctx (aws-lambda-go stores it under this string key), else def.
func TraceHeader(ctx context.Context, def string) string {
	if v, ok := ctx.Value("x-amzn-trace-id").(string); ok && v != "" {
		return v
	}
	return def
}
