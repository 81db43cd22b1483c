package capability

import (
	"context"
	"sync"
)

// DefaultCachedVersions is how many versions Cached keeps by default.
const DefaultCachedVersions = 1024

// Cached returns reg with versions kept in memory, up to n of them (0:
// DefaultCachedVersions): a version never changes once saved, so a pinned
// read (Get with a version, as a capability run does) reaches reg once per
// process and version. Reads of the latest version (Get with 0, Lookup)
// still go to reg, which they must to see a save at once, and fill the
// cache with what they read. Other methods pass through.
func Cached(reg Registry, n int) Registry {
	if n <= 0 {
		n = DefaultCachedVersions
	}
	return &cached{Registry: reg, max: n, byID: map[string]Capability{}}
}

type cached struct {
	Registry
	max int

	mu   sync.Mutex
	byID map[string]Capability
}

func (c *cached) Unwrap() Registry { return c.Registry }

func (c *cached) keep(caps ...Capability) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cp := range caps {
		if _, ok := c.byID[cp.ID]; ok {
			continue
		}
		if len(c.byID) >= c.max {
			// Any entry will do: a miss costs one read.
			for id := range c.byID {
				delete(c.byID, id)
				break
			}
		}
		c.byID[cp.ID] = cp
	}
}

// Get implements Registry.
func (c *cached) Get(ctx context.Context, name string, version int) (Capability, error) {
	if version > 0 {
		c.mu.Lock()
		cp, ok := c.byID[ID(name, version)]
		c.mu.Unlock()
		if ok {
			return cp, nil
		}
	}
	cp, err := c.Registry.Get(ctx, name, version)
	if err == nil {
		c.keep(cp)
	}
	return cp, err
}

// Lookup implements Registry.
func (c *cached) Lookup(ctx context.Context, names []string) (map[string]Capability, error) {
	out, err := c.Registry.Lookup(ctx, names)
	if err == nil {
		for _, cp := range out {
			c.keep(cp)
		}
	}
	return out, err
}

// unwrap returns the registry under the wrappers of this package.
func unwrap(reg Registry) Registry {
	for {
		u, ok := reg.(interface{ Unwrap() Registry })
		if !ok {
			return reg
		}
		reg = u.Unwrap()
	}
}
