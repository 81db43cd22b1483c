package guest

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"sync"
)

// embeddedWasm is the guest built by guest-runtime/build.sh (`make guest`).
// It is a build output, not committed.
//
//go:embed pml.wasm
var embeddedWasm []byte

// EmbeddedHash is the sha256 (hex) of the embedded guest binary. A shipped
// compilation cache records it (internal/guestcache), so that code compiled
// from another guest is never trusted; wazero's own cache key hashes the
// binary too, but gives no reason when it misses.
var EmbeddedHash = sync.OnceValue(func() string {
	sum := embeddedSum()
	return hex.EncodeToString(sum[:])
})

// embeddedSum is the embedded guest's sha256, computed once: a start asks
// for it three times (the engine, its image, the shipped cache's
// manifest), each a pass over 0.8 MB.
var embeddedSum = sync.OnceValue(func() [32]byte { return sha256.Sum256(embeddedWasm) })

// wasmSum is the sha256 of a guest binary.
func wasmSum(wasm []byte) [32]byte {
	if len(wasm) == len(embeddedWasm) && (len(wasm) == 0 || &wasm[0] == &embeddedWasm[0]) {
		return embeddedSum()
	}
	return sha256.Sum256(wasm)
}
