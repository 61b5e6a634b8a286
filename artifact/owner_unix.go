//go:build unix

package artifact

import (
	"fmt"
	"os"
	"syscall"
)

func checkOwner(dir string, st os.FileInfo) error {
	if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) != os.Geteuid() {
		return fmt.Errorf("artifact cache directory %s is owned by uid %d, not by this user (%d); refusing to run code from it", dir, s.Uid, os.Geteuid())
	}
	return nil
}
