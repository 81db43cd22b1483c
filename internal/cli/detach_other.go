//go:build !unix

package cli

import "os/exec"

// detach leaves cmd as it is where there are no sessions to start.
func detach(*exec.Cmd) {}
