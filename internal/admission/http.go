package admission

import (
	"net/http"
	"strconv"
)

// RetryAfter adds a Retry-After header to every 503 answer next gives
// that has none: a refused request's (UNAVAILABLE, retryable) tells the
// caller when to come back, in the seconds RetryAfterSeconds says.
func (c *Controller) RetryAfter(next http.Handler) http.Handler {
	value := strconv.Itoa(c.RetryAfterSeconds())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&retryWriter{ResponseWriter: w, value: value}, r)
	})
}

type retryWriter struct {
	http.ResponseWriter
	value string
}

func (w *retryWriter) WriteHeader(code int) {
	if code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", w.value)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Flush lets streamed answers through.
func (w *retryWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *retryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
