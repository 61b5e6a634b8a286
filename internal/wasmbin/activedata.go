package wasmbin

// HasActiveData reports whether the module b has an active data segment
// (one that instantiation copies into a memory). When it has none, a new
// instance's memory is all zero until the module's own code writes to it.
// Anything it cannot read counts as having one.
func HasActiveData(b []byte) bool {
	sec, err := findSection(b, secData)
	if err != nil {
		return true
	}
	if sec == nil {
		return false
	}
	n, err := sec.ULEB(32)
	if err != nil {
		return true
	}
	for i := uint64(0); i < n; i++ {
		flags, err := sec.ULEB(32)
		if err != nil || flags != 1 {
			return true // 0 and 2 are active; anything else is unreadable
		}
		l, err := sec.ULEB(32)
		if err != nil || l > uint64(len(sec.b)-sec.off) {
			return true
		}
		sec.off += int(l)
	}
	return false
}
