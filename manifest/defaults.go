package manifest

import (
	"maps"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxDefaultNesting bounds how many defaults may nest inside one another
// along a path. A recursive schema whose default re-triggers itself
// ({"properties":{"next":{"$ref":"#","default":{}}}}) would otherwise grow
// the document forever (Ajv overflows its stack on it).
const maxDefaultNesting = 32

// defaultEdges lists the subschemas that default filling descends into, as
// Ajv's useDefaults does: everything evaluated outside a composite rule.
// anyOf, oneOf, not, if, then and else are deliberately absent.
func defaultEdges(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	add := func(ss ...*jsonschema.Schema) {
		for _, x := range ss {
			if x != nil {
				out = append(out, x)
			}
		}
	}
	add(s.Ref)
	add(s.AllOf...)
	for _, k := range sortedKeys(s.Properties) {
		add(s.Properties[k])
	}
	for _, p := range sortedPatterns(s.PatternProperties) {
		add(s.PatternProperties[p])
	}
	if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		add(ap)
	}
	for _, k := range sortedKeys(s.DependentSchemas) {
		add(s.DependentSchemas[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Dependencies)) {
		if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			add(d)
		}
	}
	add(s.PrefixItems...)
	add(s.Items2020)
	switch it := s.Items.(type) {
	case *jsonschema.Schema:
		add(it)
	case []*jsonschema.Schema:
		add(it...)
	}
	if ai, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		add(ai)
	}
	return out
}

// defaultsReach returns the schemas from which filling can reach a
// `default` under `properties`. Filling skips every other schema, so a
// schema without defaults costs nothing per call.
func defaultsReach(root *jsonschema.Schema) map[*jsonschema.Schema]bool {
	var nodes []*jsonschema.Schema
	edges := map[*jsonschema.Schema][]*jsonschema.Schema{}
	stack := []*jsonschema.Schema{root}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, seen := edges[s]; seen {
			continue
		}
		e := defaultEdges(s)
		edges[s] = e
		nodes = append(nodes, s)
		stack = append(stack, e...)
	}
	reach := map[*jsonschema.Schema]bool{}
	for _, s := range nodes {
		for _, p := range s.Properties {
			if p.Default != nil {
				reach[s] = true
				break
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, s := range nodes {
			if reach[s] {
				continue
			}
			for _, c := range edges[s] {
				if reach[c] {
					reach[s] = true
					changed = true
					break
				}
			}
		}
	}
	if len(reach) == 0 {
		return nil
	}
	return reach
}

// filler inserts defaults into a decoded document, like Ajv's
// `useDefaults: true`: a property missing from an object whose schema under
// `properties` has a `default` gets a deep copy of it. It follows $ref,
// allOf, dependentSchemas, properties, patternProperties,
// additionalProperties, prefixItems and items, before validation.
type filler struct {
	reach  map[*jsonschema.Schema]bool
	filled bool
	m      *meter // the validation's work account (meter.go)
}

// fill applies s to v. active holds the schemas already applied to v (a
// $ref/allOf cycle on one value stops); nested counts defaults on the path.
func (f *filler) fill(s *jsonschema.Schema, v any, nested int, active []*jsonschema.Schema) {
	if s == nil || !f.reach[s] || slices.Contains(active, s) {
		return
	}
	f.m.add(charge(v, weights{self: 1, member: 1}))
	active = append(active, s)
	// Ajv evaluates $ref and allOf before the object keywords.
	f.fill(s.Ref, v, nested, active)
	for _, sub := range s.AllOf {
		f.fill(sub, v, nested, active)
	}
	switch x := v.(type) {
	case map[string]any:
		f.fillObject(s, x, nested, active)
	case []any:
		f.fillArray(s, x, nested)
	}
}

func (f *filler) fillObject(s *jsonschema.Schema, obj map[string]any, nested int, active []*jsonschema.Schema) {
	var justFilled map[string]bool
	if nested < maxDefaultNesting {
		for _, name := range sortedKeys(s.Properties) {
			p := s.Properties[name]
			if _, ok := obj[name]; ok || p.Default == nil {
				continue
			}
			obj[name] = deepCopy(*p.Default)
			f.filled = true
			if justFilled == nil {
				justFilled = map[string]bool{}
			}
			justFilled[name] = true
		}
	}
	for name, val := range obj {
		switch val.(type) {
		case map[string]any, []any:
		default:
			continue
		}
		n := nested
		if justFilled[name] {
			n++
		}
		evaluated := false
		if p, ok := s.Properties[name]; ok {
			f.fill(p, val, n, nil)
			evaluated = true
		}
		for _, re := range sortedPatterns(s.PatternProperties) {
			if re.MatchString(name) {
				f.fill(s.PatternProperties[re], val, n, nil)
				evaluated = true
			}
		}
		if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok && !evaluated {
			f.fill(ap, val, n, nil)
		}
	}
	for _, name := range sortedKeys(s.DependentSchemas) {
		if _, ok := obj[name]; ok {
			f.fill(s.DependentSchemas[name], obj, nested, active)
		}
	}
	for name, dep := range s.Dependencies {
		if d, ok := dep.(*jsonschema.Schema); ok {
			if _, present := obj[name]; present {
				f.fill(d, obj, nested, active)
			}
		}
	}
}

func (f *filler) fillArray(s *jsonschema.Schema, arr []any, nested int) {
	at := func(i int) *jsonschema.Schema {
		if s.DraftVersion >= 2020 {
			if i < len(s.PrefixItems) {
				return s.PrefixItems[i]
			}
			return s.Items2020
		}
		switch it := s.Items.(type) {
		case *jsonschema.Schema:
			return it
		case []*jsonschema.Schema:
			if i < len(it) {
				return it[i]
			}
			if ai, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
				return ai
			}
		}
		return nil
	}
	for i, item := range arr {
		switch item.(type) {
		case map[string]any, []any:
			f.fill(at(i), item, nested, nil)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}

func sortedPatterns(m map[jsonschema.Regexp]*jsonschema.Schema) []jsonschema.Regexp {
	if len(m) == 0 {
		return nil
	}
	out := slices.Collect(maps.Keys(m))
	slices.SortFunc(out, func(a, b jsonschema.Regexp) int {
		switch {
		case a.String() < b.String():
			return -1
		case a.String() > b.String():
			return 1
		}
		return 0
	})
	return out
}
