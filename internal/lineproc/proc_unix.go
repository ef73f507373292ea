//go:build unix

package lineproc

import (
	"os/exec"
	"syscall"
)

// detach puts the process in a process group of its own: a Ctrl-C at the
// terminal reaches stx, which ends the run after the rollout, and not the
// helper processes that rollout still needs.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killTree kills the process group, so that a wrapper (sh -c ...) does not
// leave its child holding the pipes.
func killTree(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		cmd.Process.Kill()
	}
}
