package mcpserver

import (
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	tests := []struct {
		in      string
		n       int
		want    string
		clipped bool
	}{
		{"short", 10, "short", false},
		{strings.Repeat("a", 20), 10, strings.Repeat("a", 10) + "… (10 bytes more; the result has the whole line)", true},
		// "é" is two bytes: the cut backs off to the character's start.
		{"aaaaaaaaaé", 10, "aaaaaaaaa… (2 bytes more; the result has the whole line)", true},
	}
	for _, tt := range tests {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
