//go:build !unix

package artifact

import "os"

func checkOwner(string, os.FileInfo) error { return nil }
