package egress

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// RedactedMarker returns what replaces secret name's value wherever the
// session redacts it. Its length does not depend on the value.
func RedactedMarker(name string) string { return "[REDACTED:" + name + "]" }

// redactor holds the secret values a session substituted into request
// headers, with the encodings a server commonly reflects them in (as
// written, JSON string escaping, percent-encoding), and replaces each exact
// occurrence with RedactedMarker. Safe for concurrent use.
type redactor struct {
	mu     sync.RWMutex
	seen   map[string]bool // values added
	pats   []pattern       // longest first
	maxLen int
}

type pattern struct {
	b      []byte
	lower  string // for header names, which are case-insensitive
	marker []byte
}

// add records value (secret name's) for redaction.
func (r *redactor) add(name, value string) {
	if value == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[value] {
		return
	}
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[value] = true
	marker := []byte(RedactedMarker(name))
	have := map[string]bool{}
	for _, p := range r.pats {
		have[string(p.b)] = true
	}
	for _, v := range variants(value) {
		if v == "" || have[v] {
			continue
		}
		have[v] = true
		r.pats = append(r.pats, pattern{b: []byte(v), lower: strings.ToLower(v), marker: marker})
		r.maxLen = max(r.maxLen, len(v))
	}
	sort.SliceStable(r.pats, func(i, j int) bool { return len(r.pats[i].b) > len(r.pats[j].b) })
}

// variants are the spellings of v that are redacted: as written, as a JSON
// string body (with and without HTML escaping), percent-encoded for a query
// and for a path segment.
func variants(v string) []string {
	out := []string{v}
	if b, err := json.Marshal(v); err == nil {
		out = append(out, string(b[1:len(b)-1]))
	}
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) == nil {
		s := strings.TrimSuffix(sb.String(), "\n")
		out = append(out, s[1:len(s)-1])
	}
	return append(out, url.QueryEscape(v), url.PathEscape(v))
}

// snapshot returns the current patterns (shared, read-only) and the longest.
func (r *redactor) snapshot() ([]pattern, int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pats, r.maxLen
}

// String redacts s.
func (r *redactor) String(s string) string {
	pats, maxLen := r.snapshot()
	if len(pats) == 0 {
		return s
	}
	out, _ := redactInto(nil, []byte(s), pats, maxLen, true)
	return string(out)
}

// header returns h with every name and value redacted (names matched
// case-insensitively). h is not modified.
func (r *redactor) header(h http.Header) http.Header {
	pats, maxLen := r.snapshot()
	if len(pats) == 0 {
		return h
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		name := k
		lk := strings.ToLower(k)
		for _, p := range pats {
			if strings.Contains(lk, p.lower) {
				name = "X-Redacted-Header-Name"
				break
			}
		}
		for _, v := range vs {
			rv, _ := redactInto(nil, []byte(v), pats, maxLen, true)
			out[name] = append(out[name], string(rv))
		}
	}
	return out
}

// redactInto appends to dst src with every occurrence of a pattern
// replaced by its marker (leftmost first, the longest at one position). Unless
// final, it keeps back the tail of src that could be the start of an
// occurrence completed by later bytes. It returns dst and how many bytes of
// src it consumed. Linear in len(src) per pattern.
func redactInto(dst, src []byte, pats []pattern, maxLen int, final bool) ([]byte, int) {
	next := make([]int, len(pats)) // absolute index of the next occurrence, -1 none
	for k, p := range pats {
		next[k] = bytes.Index(src, p.b)
	}
	i := 0
	for {
		best := -1
		for k := range pats {
			if next[k] >= 0 && next[k] < i {
				// Overlapped by the last replacement: look again from i.
				if j := bytes.Index(src[i:], pats[k].b); j >= 0 {
					next[k] = i + j
				} else {
					next[k] = -1
				}
			}
			// pats is longest first, so "<" keeps the longest at a position.
			if next[k] >= 0 && (best < 0 || next[k] < next[best]) {
				best = k
			}
		}
		if best < 0 {
			break
		}
		j := next[best]
		if !final && j > len(src)-maxLen {
			// A longer value starting at j may need bytes not yet here:
			// decide at j once they are (j is inside the tail kept back).
			break
		}
		dst = append(dst, src[i:j]...)
		dst = append(dst, pats[best].marker...)
		i = j + len(pats[best].b)
	}
	end := len(src)
	if !final {
		end = max(i, len(src)-(maxLen-1))
	}
	return append(dst, src[i:end]...), end
}
