package server

// ParseTraceparentForTest exposes parseTraceparent's trace id.
func ParseTraceparentForTest(h string) string {
	id, _ := ParseTraceparent(h)
	return id
}
