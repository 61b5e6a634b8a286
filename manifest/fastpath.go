package manifest

import (
	"unicode/utf8"
)

// This file is a fast path of Schema.ValidateWithin for the schema shape
// most tools declare: a closed or open object whose properties each have
// one primitive type, e.g.
//
//	{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}
//
// It checks a document on its bytes, without a decoded tree and without the
// validator, and it only ever answers "valid": whenever it is not certain
// the document is valid AND would come out of the full path unchanged (no
// default filled, no repeated key, no invalid UTF-8 or lone surrogate, no
// decoder limit or budget reached), it declines and the full path
// (santhosh-tekuri/jsonschema, the authority) decides and words the issues.
// So the result of ValidateWithin is the same with or without it
// (TestFastPathAgrees, FuzzFastPathAgrees).

// fastObject is the compiled fast path of an eligible schema.
type fastObject struct {
	props    map[string]int // property name -> index into types
	types    []fastType
	required uint64 // bit i: property i is required
}

type fastType uint8

const (
	fastString fastType = iota
	fastInteger
	fastNumber
	fastBoolean
	fastNull
)

// maxFastProps bounds the properties of an eligible schema (a bit each).
const maxFastProps = 64

// fastAnnotations are the keywords an eligible schema may carry besides
// its constraints: they never make a value invalid. "default" is not one
// of them (defaults are filled by the full path), nor "$id", "$anchor" and
// the like (they change how references resolve).
var fastAnnotations = map[string]bool{
	"title": true, "description": true, "$comment": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true,
}

// compileFast returns the fast path of the decoded schema document doc, or
// nil when doc is not of the eligible shape.
func compileFast(doc any) *fastObject {
	top, ok := doc.(map[string]any)
	if !ok || top["type"] != "object" {
		return nil
	}
	f := &fastObject{props: map[string]int{}}
	for k, v := range top {
		switch k {
		case "type":
		case "$schema": // the dialect was checked by compileSchema
		case "additionalProperties":
			if _, ok := v.(bool); !ok {
				return nil
			}
		case "properties":
			props, ok := v.(map[string]any)
			if !ok || len(props) > maxFastProps {
				return nil
			}
			for name, ps := range props {
				t, ok := leafType(ps)
				if !ok {
					return nil
				}
				f.props[name] = len(f.types)
				f.types = append(f.types, t)
			}
		case "required":
		default:
			if !fastAnnotations[k] {
				return nil
			}
		}
	}
	if req, ok := top["required"]; ok {
		list, ok := req.([]any)
		if !ok {
			return nil
		}
		for _, r := range list {
			name, ok := r.(string)
			if !ok {
				return nil
			}
			i, ok := f.props[name]
			if !ok {
				return nil // required but not a property: left to the full path
			}
			f.required |= 1 << i
		}
	}
	return f
}

// leafType reads a property schema {"type": primitive} plus annotations.
func leafType(v any) (fastType, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return 0, false
	}
	var t fastType
	seen := false
	for k, x := range m {
		if k != "type" {
			if !fastAnnotations[k] {
				return 0, false
			}
			continue
		}
		s, _ := x.(string)
		switch s {
		case "string":
			t = fastString
		case "integer":
			t = fastInteger
		case "number":
			t = fastNumber
		case "boolean":
			t = fastBoolean
		case "null":
			t = fastNull
		default:
			return 0, false
		}
		seen = true
	}
	return t, seen
}

// valid reports whether doc is certainly valid and what the full path
// would return unchanged, within budget. false means "not known": the
// full path decides.
func (f *fastObject) valid(doc []byte, budget int64) bool {
	i := skipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return false
	}
	var seen uint64
	members := 0
	i = skipSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		i++
	} else {
		for {
			// key: plain printable ASCII, no escapes
			if i >= len(doc) || doc[i] != '"' {
				return false
			}
			ks := i + 1
			j := ks
			for j < len(doc) && doc[j] != '"' {
				if c := doc[j]; c < 0x20 || c >= 0x7f || c == '\\' {
					return false
				}
				j++
			}
			if j >= len(doc) {
				return false
			}
			p, ok := f.props[string(doc[ks:j])] // no allocation: map lookup of a converted key
			if !ok || seen&(1<<p) != 0 {
				return false // an unknown key (additionalProperties decides) or a repeated one
			}
			seen |= 1 << p
			members++
			i = skipSpace(doc, j+1)
			if i >= len(doc) || doc[i] != ':' {
				return false
			}
			i = skipSpace(doc, i+1)
			end, ok := scanTyped(doc, i, f.types[p])
			if !ok {
				return false
			}
			i = skipSpace(doc, end)
			if i >= len(doc) {
				return false
			}
			if doc[i] == '}' {
				i++
				break
			}
			if doc[i] != ',' {
				return false
			}
			i = skipSpace(doc, i+1)
		}
	}
	if skipSpace(doc, i) != len(doc) || seen&f.required != f.required {
		return false
	}
	// What the decoder would charge at most: the object, each member and
	// its value, and every byte of an escaped string.
	cost := int64(ValueCost+objectCost) + int64(members)*(memberCost+ValueCost) + int64(len(doc))
	return cost <= budget
}

func skipSpace(b []byte, i int) int {
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

// scanTyped checks that the value at doc[i] is of type t (certainly, as
// the full path would decide) and returns the index past it.
func scanTyped(doc []byte, i int, t fastType) (int, bool) {
	if i >= len(doc) {
		return 0, false
	}
	switch t {
	case fastString:
		if doc[i] != '"' {
			return 0, false
		}
		return scanPlainString(doc, i+1)
	case fastInteger, fastNumber:
		return scanShortNumber(doc, i, t == fastInteger)
	case fastBoolean:
		if len(doc)-i >= 4 && string(doc[i:i+4]) == "true" {
			return i + 4, true
		}
		if len(doc)-i >= 5 && string(doc[i:i+5]) == "false" {
			return i + 5, true
		}
	case fastNull:
		if len(doc)-i >= 4 && string(doc[i:i+4]) == "null" {
			return i + 4, true
		}
	}
	return 0, false
}

// scanPlainString scans a string body from doc[i] (past the opening quote)
// to past its closing quote. It declines a control character, an invalid
// UTF-8 sequence, a malformed escape and any \u escape of a surrogate (the
// full path decides those: it may replace them).
func scanPlainString(doc []byte, i int) (int, bool) {
	for {
		i += plainRun(doc[i:])
		if i >= len(doc) {
			return 0, false
		}
		switch c := doc[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(doc) {
				return 0, false
			}
			switch doc[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(doc, i+2)
				if !ok || (r >= 0xd800 && r <= 0xdfff) {
					return 0, false
				}
				i += 6
			default:
				return 0, false
			}
		case c < 0x20:
			return 0, false
		default: // a byte >= 0x80
			r, size := utf8.DecodeRune(doc[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, false
			}
			i += size
		}
	}
}

// scanShortNumber accepts -?(0|[1-9][0-9]*) and, unless integer, a
// fraction; it declines exponents and literals over 64 bytes (the full path
// decides those: "1.0" is an integer there, and long literals hit the
// decoder's limits).
func scanShortNumber(doc []byte, i int, integer bool) (int, bool) {
	s := i
	if doc[i] == '-' {
		i++
	}
	if i >= len(doc) {
		return 0, false
	}
	switch {
	case doc[i] == '0':
		i++
	case doc[i] >= '1' && doc[i] <= '9':
		for i < len(doc) && doc[i] >= '0' && doc[i] <= '9' {
			i++
		}
	default:
		return 0, false
	}
	if i < len(doc) && doc[i] == '.' {
		if integer {
			return 0, false
		}
		i++
		d := i
		for i < len(doc) && doc[i] >= '0' && doc[i] <= '9' {
			i++
		}
		if i == d {
			return 0, false
		}
	}
	if i < len(doc) && (doc[i] == 'e' || doc[i] == 'E') {
		return 0, false
	}
	if i-s > 64 {
		return 0, false
	}
	return i, true
}
