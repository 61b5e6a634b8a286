package fuel

// StatelessWASI reports whether a call of the WASI preview1 function name
// leaves nothing behind in an instance's host state (the pass sets the
// dirty flag before a call of any other; statelessWASI says which).
func StatelessWASI(name string) bool { return statelessWASI[name] }
