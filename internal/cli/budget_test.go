package cli

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
)

// TestServeBudgetFlags: flags win over the environment, which fills what
// they leave unset; anything that is not a size, a count or a duration is
// a usage error.
func TestServeBudgetFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		ok   bool
		mem  int64
		n    int
		wait time.Duration
	}{
		{"defaults", nil, nil, true, 0, 0, 0},
		{"flags", []string{"--max-memory", "2GiB", "--max-executions", "7", "--queue-wait", "1s"}, nil, true, 2 << 30, 7, time.Second},
		{"environment", nil, map[string]string{app.EnvServeMemory: "512MB", app.EnvServeExecutions: "3", app.EnvServeQueueWait: "250ms"}, true, 512e6, 3, 250 * time.Millisecond},
		{"flags over environment", []string{"--max-memory", "1GiB"}, map[string]string{app.EnvServeMemory: "512MB"}, true, 1 << 30, 0, 0},
		{"not a size", []string{"--max-memory", "lots"}, nil, false, 0, 0, 0},
		{"zero memory", nil, map[string]string{app.EnvServeMemory: "0"}, false, 0, 0, 0},
		{"bad count", nil, map[string]string{app.EnvServeExecutions: "-2"}, false, 0, 0, 0},
		{"bad wait", nil, map[string]string{app.EnvServeQueueWait: "soon"}, false, 0, 0, 0},
		{"budget too small", []string{"--max-memory", "8MiB"}, nil, false, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{app.EnvServeMemory, app.EnvServeExecutions, app.EnvServeQueueWait} {
				t.Setenv(k, tt.env[k])
			}
			var f serveBudgetFlags
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := f.check()
			var cfgErr error
			if err == nil {
				ctl, cerr := f.controller(nil)
				cfgErr = cerr
				if cerr == nil {
					cfg := ctl.Config()
					if (tt.mem != 0 && cfg.Memory != tt.mem) || (tt.n != 0 && cfg.Executions != tt.n) || (tt.wait != 0 && cfg.Wait != tt.wait) {
						t.Errorf("budget %+v, want memory %d, executions %d, wait %v", cfg, tt.mem, tt.n, tt.wait)
					}
				}
			}
			if ok := err == nil && cfgErr == nil; ok != tt.ok {
				t.Fatalf("check: %v, controller: %v; want ok %v", err, cfgErr, tt.ok)
			}
		})
	}
}
