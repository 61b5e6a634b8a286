package server

import "github.com/sandboxd/sandboxd/internal/suggest"

// notInPackHint is the " (did you mean "x"?)" a tool-not-in-pack message
// ends with when one of ids is within two edits of id (and closer than
// half its length: suggest.Nearest), else "". It runs only on that
// failure path.
func notInPackHint(id string, ids []string) string {
	if n := suggest.Nearest(id, ids); n != "" {
		return ` (did you mean "` + n + `"?)`
	}
	return ""
}
