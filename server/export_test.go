package server

// ParseTraceparentForTest exposes parseTraceparent's trace id.
func ParseTraceparentForTest(h string) string {
	id, _ := parseTraceparent(h)
	return id
}
