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
	sum := sha256.Sum256(embeddedWasm)
	return hex.EncodeToString(sum[:])
})
