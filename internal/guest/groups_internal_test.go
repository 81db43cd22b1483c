package guest

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// groupsOf splits a grouped state into its groups' stored bytes.
func groupsOf(t *testing.T, state []byte) map[uint32][]byte {
	t.Helper()
	if !isGroups(state) {
		t.Fatal("not a grouped state")
	}
	out := map[uint32][]byte{}
	rest := state[12:]
	for len(rest) > 0 {
		k, n := binary.LittleEndian.Uint32(rest), binary.LittleEndian.Uint32(rest[8:])
		out[k] = rest[12 : 12+n]
		rest = rest[12+n:]
	}
	return out
}

// TestGroupedStateReusesOnlyWhatDidNotChange: a session's state restored
// and saved again keeps, byte for byte, the groups whose pages the
// execution left as they were, and encodes anew every group with a changed,
// added or dropped page; every state restores the memory exactly.
func TestGroupedStateReusesOnlyWhatDidNotChange(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	base := e.snap.baseMemory()
	rng := rand.New(rand.NewPCG(1, 2))
	page := func(p int, fill byte) []byte {
		b := make([]byte, pageSize)
		for i := range b {
			b[i] = fill ^ byte(rng.IntN(4))
		}
		return b
	}
	snapshot := func(in *instance) []byte {
		m, _ := in.mod.Memory().Read(0, in.mod.Memory().Size())
		return bytes.Clone(m)
	}
	// Pages of a few groups, spread over memory the snapshot holds.
	pages := []int{100, 101, 130, 200, 201, 202, 203, 500}
	in, err := e.instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		in.mod.Memory().Write(uint32(p*pageSize), page(p, 0x40))
	}
	want := snapshot(in)
	s1, ferr := e.sessionState(in, nil)
	if ferr != nil {
		t.Fatal(ferr)
	}
	in.close(ctx)

	restore := func(state []byte) (*instance, *restored) {
		in, err := e.instance(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.restoreState(in, state)
		if err != nil {
			t.Fatal(err)
		}
		return in, r
	}
	in2, prev := restore(s1.Memory)
	if !bytes.Equal(snapshot(in2), want) {
		t.Fatal("the restored memory differs from the saved one")
	}
	// Change page 201 (group 12), write page 130 again with what it holds
	// (group 8: written, not changed), put page 500 back as the image has
	// it (group 31 loses its page), and add page 700 (group 43).
	m := in2.mod.Memory()
	m.Write(201*pageSize, page(201, 0x99))
	same, _ := m.Read(130*pageSize, pageSize)
	m.Write(130*pageSize, bytes.Clone(same))
	m.Write(500*pageSize, base[500*pageSize:501*pageSize])
	m.Write(700*pageSize, page(700, 0x11))
	want = snapshot(in2)
	s2, ferr := e.sessionState(in2, prev)
	if ferr != nil {
		t.Fatal(ferr)
	}
	in2.close(ctx)
	g1, g2 := groupsOf(t, s1.Memory), groupsOf(t, s2.Memory)
	for k, want := range map[uint32]bool{100 / groupPages: true, 130 / groupPages: true, 201 / groupPages: false} {
		if reused := bytes.Equal(g1[k], g2[k]); reused != want {
			t.Errorf("group %d reused %v, want %v", k, reused, want)
		}
	}
	if _, ok := g2[500/groupPages]; ok {
		t.Error("a group whose only page went back to the image is still stored")
	}
	if _, ok := g2[700/groupPages]; !ok {
		t.Error("the added page's group is missing")
	}
	in3, _ := restore(s2.Memory)
	defer in3.close(ctx)
	if !bytes.Equal(snapshot(in3), want) {
		t.Fatal("the state saved from a restored one does not restore the memory it was saved from")
	}
}

// TestGroupedStateRefusesDamage: a damaged state is refused, never
// applied in part as if whole.
func TestGroupedStateRefusesDamage(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	in, _ := e.instance(ctx)
	in.mod.Memory().Write(300*pageSize, bytes.Repeat([]byte{7}, pageSize))
	s, _ := e.sessionState(in, nil)
	in.close(ctx)
	for name, bad := range map[string][]byte{
		"cut short":   s.Memory[:len(s.Memory)-3],
		"extra bytes": append(bytes.Clone(s.Memory), 0),
		"no groups":   s.Memory[:8],
	} {
		in, _ := e.instance(ctx)
		if _, err := e.restoreState(in, bad); err == nil {
			t.Errorf("%s: restored", name)
		}
		in.close(ctx)
	}
}
