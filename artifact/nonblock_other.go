//go:build !unix

package artifact

const openNonblock = 0
