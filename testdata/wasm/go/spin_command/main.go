// spin_command is a plain Go command that spins forever: a tight loop that
// updates a package-level variable (so the loop is not optimised away) and
// never calls the host. Only cpuMs or the wall deadline can stop it.
package main

var spins uint64

func main() {
	for {
		spins++
	}
}
