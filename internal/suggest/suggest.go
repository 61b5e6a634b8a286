// Package suggest finds the name a mistyped one was probably meant to be:
// the one "did you mean" rule behind the CLI's unknown commands and flags
// (cmd/sandboxd), a manifest's unknown properties and enum values
// (manifest), and a call to a tool the pack does not have (server's
// tool-not-in-pack, mcp's unknown tool). It is a leaf: it imports nothing
// of the module, and runs only on failure paths.
package suggest

import "strings"

// MaxLen bounds the names Nearest and Completion compare, in bytes (the
// distance is quadratic; a name that long is no slip of the keyboard).
const MaxLen = 128

// Nearest returns the candidate name is most likely a slip for: the
// closest by Distance, ignoring ASCII case, when it is at most 2 edits
// away and the edits are at most half of name ("rn" → "run", "limts" →
// "limits", "acme.ecko" → "acme.echo"; "xyz" → nothing). Ties go to the
// candidate that sorts first, so the answer does not depend on the order
// of candidates. It returns "" when none is that close, when name is
// empty or over MaxLen bytes, or when name is itself a candidate.
func Nearest(name string, candidates []string) string {
	if name == "" || len(name) > MaxLen {
		return ""
	}
	low := strings.ToLower(name)
	best, bestD := "", 3
	for _, c := range candidates {
		if c == name {
			return ""
		}
		if len(c) > MaxLen {
			continue
		}
		d := Distance(low, strings.ToLower(c))
		if d*2 > len(name) {
			continue
		}
		if d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	return best
}

// Completion returns the one candidate that name abbreviates: name is at
// least 3 bytes and, ignoring ASCII case, a prefix of exactly one
// candidate ("conf" → "conformance"). It returns "" otherwise, and when
// name is itself a candidate.
func Completion(name string, candidates []string) string {
	if len(name) < 3 || len(name) > MaxLen {
		return ""
	}
	low := strings.ToLower(name)
	found := ""
	for _, c := range candidates {
		if c == name {
			return ""
		}
		if len(c) >= len(name) && strings.ToLower(c[:len(name)]) == low {
			if found != "" {
				return ""
			}
			found = c
		}
	}
	return found
}

// Distance is the Levenshtein distance of a and b: the fewest single-byte
// insertions, deletions and substitutions that turn a into b. It compares
// bytes (the names it serves are ASCII) and costs O(len(a)·len(b)) time;
// it allocates nothing when b is at most MaxLen bytes.
func Distance(a, b string) int {
	var buf [MaxLen + 1]int
	var row []int
	if len(b) < len(buf) {
		row = buf[:len(b)+1]
	} else {
		row = make([]int, len(b)+1)
	}
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cur := row[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			row[j] = min(row[j]+1, row[j-1]+1, prev+cost)
			prev = cur
		}
	}
	return row[len(b)]
}
