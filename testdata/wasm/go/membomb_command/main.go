// membomb_command is a plain Go command that allocates 1 MiB slices and
// keeps every one alive until the Go runtime cannot grow memory any more and
// dies ("fatal error: out of memory", exit 2).
package main

var hoard [][]byte

func main() {
	for i := 0; ; i++ {
		b := make([]byte, 1<<20)
		b[0] = byte(i) // touch it
		hoard = append(hoard, b)
	}
}
