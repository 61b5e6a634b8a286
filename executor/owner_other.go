//go:build !unix

package executor

import "os"

func checkOwner(string, os.FileInfo) error { return nil }
