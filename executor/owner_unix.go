//go:build unix

package executor

import (
	"fmt"
	"os"
	"syscall"
)

func checkOwner(dir string, st os.FileInfo) error {
	if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) != os.Geteuid() {
		return fmt.Errorf("executor: cache directory %s is owned by uid %d, not by this user (%d); refusing to run code from it", dir, s.Uid, os.Geteuid())
	}
	return nil
}
