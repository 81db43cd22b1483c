package guest

import _ "embed"

// embeddedWasm is the guest built by guest-runtime/build.sh (`make guest`).
// It is a build output, not committed.
//
//go:embed pml.wasm
var embeddedWasm []byte
