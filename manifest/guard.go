package manifest

import (
	"encoding/json"
	"math"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Bounds on a schema document, which cost time at Load (the library's
// compiler is quadratic in the number of subschemas) and per validation
// (subschemas reused through $ref/allOf multiply: {"a2":{"allOf":[a1,a1]}}).
const (
	maxSchemaNodes = 10000
	maxSchemaCost  = 1000000
)

// countContainers counts the objects and arrays in v, stopping at limit.
func countContainers(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		if n >= limit {
			return
		}
		switch x := v.(type) {
		case map[string]any:
			n++
			for _, e := range x {
				walk(e)
			}
		case []any:
			n++
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return n
}

// cost estimates how many subschemas validating one value can evaluate:
// each subschema counts once per way it is reached from the root (a
// recursive reference counts nothing more). Saturates above maxSchemaCost.
func cost(root *jsonschema.Schema) int {
	memo := map[*jsonschema.Schema]int{}
	var visit func(s *jsonschema.Schema) int
	visit = func(s *jsonschema.Schema) int {
		if s == nil {
			return 0
		}
		if c, ok := memo[s]; ok {
			return c // 0 while in progress: a cycle adds nothing
		}
		memo[s] = 0
		total := 1
		for _, sub := range subschemas(s) {
			total += visit(sub)
			if total > maxSchemaCost {
				total = maxSchemaCost + 1
			}
		}
		memo[s] = total
		return total
	}
	return visit(root)
}

// sameValueCycle finds a schema that applies itself to the value it
// validates ({"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}}}): Ajv overflows
// its stack on it and jsonschema fails every value, so Load refuses it. It
// returns the location where the cycle closes.
func sameValueCycle(root *jsonschema.Schema) (string, bool) {
	const (
		active = 1
		done   = 2
	)
	state := map[*jsonschema.Schema]int{}
	var loc string
	var visit func(s *jsonschema.Schema) bool
	visit = func(s *jsonschema.Schema) bool {
		if s == nil {
			return false
		}
		switch state[s] {
		case active:
			loc = s.Location
			return true
		case done:
			return false
		}
		state[s] = active
		same := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else}
		if s.DynamicRef != nil {
			same = append(same, s.DynamicRef.Ref)
		}
		same = append(same, s.AllOf...)
		same = append(same, s.AnyOf...)
		same = append(same, s.OneOf...)
		for _, k := range sortedKeys(s.DependentSchemas) {
			same = append(same, s.DependentSchemas[k])
		}
		for _, k := range sortedKeys(s.Dependencies) {
			if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
				same = append(same, d)
			}
		}
		for _, c := range same {
			if visit(c) {
				return true
			}
		}
		state[s] = done
		return false
	}
	// Every subschema starts a search: a cycle anywhere is reachable by
	// some value.
	for _, s := range allSchemas(root) {
		if visit(s) {
			return loc, true
		}
	}
	return "", false
}

// allSchemas lists root and every subschema reachable from it, once.
func allSchemas(root *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	seen := map[*jsonschema.Schema]bool{}
	stack := []*jsonschema.Schema{root}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s == nil || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
		stack = append(stack, subschemas(s)...)
	}
	return out
}

// countKeywords are the keywords jsonschema stores as int: a larger value
// would wrap around silently ({"maxLength": 18446744073709551616} became 0).
var countKeywords = []string{"minLength", "maxLength", "minItems", "maxItems",
	"minProperties", "maxProperties", "minContains", "maxContains"}

// checkCounts refuses count keywords that do not fit in an int32.
func checkCounts(doc any, root *jsonschema.Schema) (string, bool) {
	for _, s := range allSchemas(root) {
		ptr := ptrOf(s.Location)
		obj, ok := lookup(doc, fragmentTokens(ptr)).(map[string]any)
		if !ok || (ptr == "" && !strings.HasPrefix(s.Location, docURL)) {
			continue
		}
		for _, kw := range countKeywords {
			n, ok := obj[kw].(json.Number)
			if !ok {
				continue
			}
			if i, ok := int64Of(n); !ok || i > math.MaxInt32 || i < math.MinInt32 {
				return ptr + "/" + kw, true
			}
		}
	}
	return "", false
}

// subschemas lists every subschema s applies, in any position.
func subschemas(s *jsonschema.Schema) []*jsonschema.Schema {
	out := defaultEdges(s)
	add := func(ss ...*jsonschema.Schema) {
		for _, x := range ss {
			if x != nil {
				out = append(out, x)
			}
		}
	}
	add(s.RecursiveRef, s.Not, s.If, s.Then, s.Else, s.PropertyNames, s.Contains,
		s.UnevaluatedProperties, s.UnevaluatedItems, s.ContentSchema)
	if s.DynamicRef != nil {
		add(s.DynamicRef.Ref)
	}
	add(s.AnyOf...)
	add(s.OneOf...)
	return out
}
