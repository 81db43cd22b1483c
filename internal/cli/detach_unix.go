//go:build unix

package cli

import (
	"os/exec"
	"syscall"
)

// detach starts cmd in a session of its own: it outlives this process and
// its terminal (no SIGHUP, no Ctrl-C of the parent's process group).
func detach(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }
