package registrytest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the registry if the test process dies first.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
