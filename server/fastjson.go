package server

import (
	"encoding/binary"
	"encoding/json"
)

// This file is a fast path for parseFrame: it splits a JSON object into
// its members in one pass, with no reflection, for the frames every call
// sends. It accepts only what encoding/json accepts and yields exactly
// what json.Unmarshal into a map[string]json.RawMessage would (each value
// trimmed of whitespace, the last of duplicate keys winning), but it gives
// up (ok false) on anything it does not handle simply — a key with an
// escape or a non-ASCII byte, a value nested deeper than fastMaxDepth, any
// syntax error — and the caller then takes the encoding/json path, which
// answers those cases (and words every error) as before.
//
// The values alias b (json.Unmarshal would copy them): b must not be
// modified while they are in use.

// fastMaxDepth bounds the nesting the fast path follows (encoding/json
// allows 10000; deeper values take the slow path and its error).
const fastMaxDepth = 512

// member is one member of a JSON object: its key and its value as written.
type member struct {
	key string
	val json.RawMessage
}

// object is a JSON object's members in the order written (duplicates
// kept). parseFrame reads frames through it instead of a map: a frame's
// objects have a handful of members, and a slice appended into an array
// on the caller's stack costs no allocation (three maps per frame were 6
// of the served path's allocations).
type object []member

// get returns the value of the last member named k (json.Unmarshal into a
// map keeps the last of duplicate keys).
func (o object) get(k string) (json.RawMessage, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].key == k {
			return o[i].val, true
		}
	}
	return nil, false
}

// val is get's value alone (nil when there is no member k).
func (o object) val(k string) json.RawMessage {
	v, _ := o.get(k)
	return v
}

// objectOf is the object of a map decoded by encoding/json (the slow
// path); nil for a nil map (JSON null).
func objectOf(m map[string]json.RawMessage) object {
	if m == nil {
		return nil
	}
	o := make(object, 0, len(m))
	for k, v := range m {
		o = append(o, member{k, v})
	}
	return o
}

// splitObject returns the members of the JSON object b (b holds that one
// value, optionally surrounded by whitespace) as a map.
func splitObject(b []byte) (map[string]json.RawMessage, bool) {
	o, ok := splitMembers(b, nil)
	if !ok {
		return nil, false
	}
	m := make(map[string]json.RawMessage, len(o))
	for _, kv := range o {
		m[kv.key] = kv.val
	}
	return m, true
}

// splitMembers appends the members of the JSON object b (b holds that one
// value, optionally surrounded by whitespace) to buf. The object of {} is
// empty, not nil.
func splitMembers(b []byte, buf object) (object, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	m := buf
	if m == nil {
		m = make(object, 0, 8)
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		if skipWS(b, i+1) != len(b) {
			return nil, false
		}
		return m, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		ks := i + 1
		j := ks
		for j < len(b) && b[j] != '"' {
			if c := b[j]; c < 0x20 || c >= 0x80 || c == '\\' {
				return nil, false
			}
			j++
		}
		if j >= len(b) {
			return nil, false
		}
		key := internKey(b[ks:j])
		i = skipWS(b, j+1)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipWS(b, i+1)
		end, ok := scanValue(b, i, 0)
		if !ok {
			return nil, false
		}
		m = append(m, member{key, json.RawMessage(b[i:end:end])})
		i = skipWS(b, end)
		if i >= len(b) {
			return nil, false
		}
		if b[i] == '}' {
			if skipWS(b, i+1) != len(b) {
				return nil, false
			}
			return m, true
		}
		if b[i] != ',' {
			return nil, false
		}
		i = skipWS(b, i+1)
	}
}

// internKey returns the key's string, without an allocation for the keys
// every frame has (the string(b) comparisons of a switch do not allocate).
func internKey(b []byte) string {
	switch string(b) {
	case "v":
		return "v"
	case "kind":
		return "kind"
	case "tool":
		return "tool"
	case "input":
		return "input"
	case "ctx":
		return "ctx"
	case "id":
		return "id"
	case "version":
		return "version"
	case "tenantId":
		return "tenantId"
	case "runId":
		return "runId"
	case "requestId":
		return "requestId"
	case "projectId":
		return "projectId"
	case "orgId":
		return "orgId"
	}
	return string(b)
}

// plainKind is plainString without an allocation for the kinds a pack
// service answers.
func plainKind(raw []byte) (string, bool) {
	switch string(raw) {
	case `"invoke"`:
		return "invoke", true
	case `"check-invoke"`:
		return "check-invoke", true
	}
	return plainString(raw)
}

// plainString returns the value of the JSON string raw when it is printable
// ASCII without escapes (what json.Unmarshal into a string would give).
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c < 0x20 || c >= 0x7f || c == '\\' || c == '"' {
			return "", false
		}
	}
	return string(raw[1 : len(raw)-1]), true
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanValue checks the JSON value starting at b[i] and returns the index
// just past it.
func scanValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return scanString(b, i)
	case c == '{' || c == '[':
		if depth >= fastMaxDepth {
			return 0, false
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1, true
		}
		for {
			if c == '{' {
				var ok bool
				if i >= len(b) || b[i] != '"' {
					return 0, false
				}
				if i, ok = scanString(b, i); !ok {
					return 0, false
				}
				i = skipWS(b, i)
				if i >= len(b) || b[i] != ':' {
					return 0, false
				}
				i = skipWS(b, i+1)
			}
			end, ok := scanValue(b, i, depth+1)
			if !ok {
				return 0, false
			}
			i = skipWS(b, end)
			if i >= len(b) {
				return 0, false
			}
			if b[i] == closer {
				return i + 1, true
			}
			if b[i] != ',' {
				return 0, false
			}
			i = skipWS(b, i+1)
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(b, i)
	case c == 't':
		return scanLit(b, i, "true")
	case c == 'f':
		return scanLit(b, i, "false")
	case c == 'n':
		return scanLit(b, i, "null")
	}
	return 0, false
}

func scanLit(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// scanString checks the string starting at b[i] (a '"'). Bytes ≥ 0x80 are
// taken as they are, as encoding/json does (it replaces invalid UTF-8 when
// it decodes, which RawMessage does not).
func scanString(b []byte, i int) (int, bool) {
	i++
	for i < len(b) {
		// Eight bytes at a time while none of them is special (a 1 KiB
		// string was a byte-by-byte table loop, 1.9% of the served path's
		// CPU under wrk), then byte by byte up to the special one.
		for i+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			if i+1 >= len(b) {
				return 0, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 6
			default:
				return 0, false
			}
		default:
			i++
		}
	}
	return 0, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// scanNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	digits := func() bool {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > s
	}
	if i >= len(b) {
		return 0, false
	}
	if b[i] == '0' {
		i++
	} else if !digits() {
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, false
		}
	}
	return i, true
}

// special8 reports whether any of the eight bytes packed in x is not a
// plainByte: a control character (< 0x20), '"' or '\\'. Bytes from 0x80
// up are plain. The word tricks are exact for "any byte" (not for which
// one): for a byte c < 0x80, c - n borrows into bit 7 exactly when c < n,
// and a byte c ≥ 0x80 has bit 7 of ^c clear; a borrow only ever starts
// at a byte that is itself below n (or zero, for equality).
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	less := (x - ones*0x20) &^ x // a byte < 0x20
	quote := x ^ (ones * '"')    // zero where a byte is '"'
	slash := x ^ (ones * '\\')   // zero where a byte is '\\'
	zero := func(v uint64) uint64 { return (v - ones) &^ v }
	return (less|zero(quote)|zero(slash))&highs != 0
}

// plainByte marks the bytes a JSON string holds as they are: not a
// control character, '"' or '\\'.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
