package httpapi

import (
	"net/http"
	"testing"
)

func TestWantsEventStream(t *testing.T) {
	tests := []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"application/json"}, false},
		{[]string{"*/*"}, false},
		{[]string{"text/event-stream"}, true},
		{[]string{"application/json, text/event-stream"}, true},
		{[]string{"application/json", "text/event-stream;q=0.5"}, true},
		{[]string{"text/event-stream;q=0"}, false},
		{[]string{"text/event-stream; q=0.000"}, false},
		{[]string{"text/event-stream;q=0.05"}, true},
		{[]string{"text/event-stream;q=bogus"}, true},
	}
	for _, tc := range tests {
		r, _ := http.NewRequest("POST", "/execute", nil)
		for _, v := range tc.accept {
			r.Header.Add("Accept", v)
		}
		if got := wantsEventStream(r); got != tc.want {
			t.Errorf("Accept %q: %v, want %v", tc.accept, got, tc.want)
		}
	}
}
