package server

import "strings"

// notInPackHint is the " (did you mean "x"?)" a tool-not-in-pack message
// ends with when one of ids is within two edits of id (and closer than
// half its length), else "". It runs only on that failure path.
func notInPackHint(id string, ids []string) string {
	if n := nearestID(id, ids); n != "" {
		return ` (did you mean "` + n + `"?)`
	}
	return ""
}

func nearestID(id string, ids []string) string {
	if len(id) > maxSuggestLen {
		return ""
	}
	low := strings.ToLower(id)
	best, bestD := "", 3
	for _, c := range ids {
		if len(c) > maxSuggestLen {
			continue
		}
		if d := editDistance(low, strings.ToLower(c)); d < bestD && d*2 <= len(id) {
			best, bestD = c, d
		}
	}
	return best
}

// maxSuggestLen bounds the ids compared (the distance is quadratic).
const maxSuggestLen = 128

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	var buf [maxSuggestLen + 1]int
	row := buf[:len(b)+1]
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
