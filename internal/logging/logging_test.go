package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
)

func TestNew(t *testing.T) {
	tests := []struct {
		env       string
		def       slog.Level
		debugSeen bool
		infoSeen  bool
	}{
		{"", slog.LevelInfo, false, true},
		{"debug", slog.LevelInfo, true, true},
		{"warn", slog.LevelInfo, false, false},
		{"loud", slog.LevelDebug, true, true}, // not a level: the default
	}
	for _, tc := range tests {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(EnvLevel, tc.env)
			var b bytes.Buffer
			log := New(&b, tc.def)
			log.Debug("d")
			log.Info("i")
			var got []string
			for _, line := range bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n")) {
				var rec struct{ Msg string }
				if len(line) > 0 {
					if err := json.Unmarshal(line, &rec); err != nil {
						t.Fatalf("not JSON: %s", line)
					}
					got = append(got, rec.Msg)
				}
			}
			want := []string{}
			if tc.debugSeen {
				want = append(want, "d")
			}
			if tc.infoSeen {
				want = append(want, "i")
			}
			if len(got) != len(want) || (len(got) > 0 && got[0] != want[0]) {
				t.Fatalf("logged %v, want %v", got, want)
			}
		})
	}
}
