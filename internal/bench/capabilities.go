package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pml-sandbox/pml/internal/capability"
)

// CapabilityCounts are the registry sizes the capability figures measure
// at (issue 25: an execution's cost must not grow with what others saved).
var CapabilityCounts = []int{0, 1000, 10000}

// The scripts the capability figures run: nothing, and one capability
// call (math:sum, which runs in a sandbox of its own and calls nothing).
const (
	capScriptReturn  = "return 1"
	capScriptOneCall = "return await mcp.math.sum({xs: [1, 2, 3]})"
)

// capabilityRequests is how many back-to-back requests each figure takes
// the median of, after capabilityWarmUp uncounted ones.
const (
	capabilityRequests = 200
	capabilityWarmUp   = 50
)

// SeedCapabilities is n capabilities in n/10 namespaces, each with a
// description and an input schema as agents save them, plus math:sum.
func SeedCapabilities(n int) []capability.Capability {
	caps := []capability.Capability{{Name: "math:sum", Code: "return args.xs.reduce((a, b) => a + b, 0)", Description: "adds numbers"}}
	for i := range n {
		caps = append(caps, capability.Capability{
			Name:        fmt.Sprintf("ns%d:action%d", i/10, i),
			Code:        fmt.Sprintf("const r = await mcp.demo.add({a: args.a, b: %d}); return r", i),
			Description: fmt.Sprintf("adds %d to a number, a learned program saved by an agent (number %d)", i, i),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`),
		})
	}
	return caps
}

// measureCapabilities measures `pml serve` (as measureServe starts it, the
// file registry) with each of CapabilityCounts capabilities saved: the
// median of back-to-back POST /execute for `return 1` and for one
// capability call, and how much each grew from the smallest registry to
// the largest. The servers run side by side and take requests in turn,
// one size after another, so a machine whose load drifts weighs on every
// size alike.
func measureCapabilities(ctx context.Context, cacheDir string, progress func(string)) (figs []Figure, err error) {
	servers := make([]*served, len(CapabilityCounts))
	defer func() {
		for _, s := range servers {
			if s != nil {
				s.close()
			}
		}
	}()
	for i, n := range CapabilityCounts {
		progress(fmt.Sprintf("pml serve with %d capabilities saved", n))
		if servers[i], err = startServedWith(ctx, cacheDir, func(path string) error { return capability.SeedFile(path, SeedCapabilities(n)) }, nil); err != nil {
			return nil, err
		}
	}
	progress(fmt.Sprintf("pml serve with %v capabilities, in turn: return 1, one capability call", CapabilityCounts))
	ret, err := inTurn(ctx, servers, capScriptReturn)
	if err != nil {
		return nil, err
	}
	one, err := inTurn(ctx, servers, capScriptOneCall)
	if err != nil {
		return nil, err
	}
	for i, n := range CapabilityCounts {
		figs = append(figs,
			Figure{Key: fmt.Sprintf("capabilities_%d_return_p50_ms", n), Name: fmt.Sprintf("pml serve, %d capabilities saved: `%s`, p50", n, capScriptReturn),
				Value: msf(ret[i]), Unit: "ms"},
			Figure{Key: fmt.Sprintf("capabilities_%d_one_call_p50_ms", n), Name: "same, one capability call",
				Value: msf(one[i]), Unit: "ms"})
	}
	lo, hi := CapabilityCounts[0], CapabilityCounts[len(CapabilityCounts)-1]
	growth := func(ts []time.Duration) float64 { return 100 * (msf(ts[len(ts)-1]) - msf(ts[0])) / msf(ts[0]) }
	figs = append(figs,
		Figure{Key: "capabilities_growth_return_pct", Name: fmt.Sprintf("growth of `%s` from %d to %d capabilities", capScriptReturn, lo, hi),
			Value: growth(ret), Unit: "%", Target: "≤ 10 %"},
		Figure{Key: "capabilities_growth_one_call_pct", Name: fmt.Sprintf("growth of one capability call from %d to %d capabilities", lo, hi),
			Value: growth(one), Unit: "%", Target: "≤ 10 %"})
	return figs, nil
}

// inTurn sends code to each server in turn, capabilityWarmUp rounds
// uncounted then capabilityRequests, and returns each server's median time
// to answer.
func inTurn(ctx context.Context, servers []*served, code string) ([]time.Duration, error) {
	body, err := json.Marshal(map[string]string{"code": code})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ts := make([][]time.Duration, len(servers))
	for round := range capabilityWarmUp + capabilityRequests {
		for i, s := range servers {
			start := time.Now()
			if err := s.execute(ctx, body); err != nil {
				return nil, err
			}
			if round >= capabilityWarmUp {
				ts[i] = append(ts[i], time.Since(start))
			}
		}
	}
	out := make([]time.Duration, len(servers))
	for i := range ts {
		out[i] = median(ts[i])
	}
	return out, nil
}
