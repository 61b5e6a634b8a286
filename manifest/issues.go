package manifest

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/sandboxd/sandboxd/toolerr"
)

// issueConverter turns a jsonschema.ValidationError tree into Ajv-shaped
// issues (https://ajv.js.org/api.html#error-objects).
//
// Order: the library walks objects in Go map order, so siblings are sorted:
// by instance location (array indices numerically), then by keyword in Ajv's
// evaluation order, then by schema location. Branches of allOf/anyOf/oneOf
// keep their schema order; an anyOf/oneOf/contains/propertyNames issue
// follows the issues of its branches, as in Ajv with allErrors.
type issueConverter struct {
	docURL    string   // URL the schema document was compiled under
	schemaDoc any      // the decoded schema document, for raw keyword values
	instance  any      // the validated document (uniqueItems, additionalItems)
	prefix    []string // prepended to every instancePath
	issues    []toolerr.Issue
	collapsed map[string]bool // one Ajv issue for several library errors
	size      int             // JSON bytes of issues so far (about)
	omitted   int             // issues past MaxIssues / MaxIssueBytes
}

// Bounds of the issues one validation returns (Ajv's allErrors, with a
// ceiling): past them issues are counted, not kept, and a last issue says
// how many were left out.
const (
	// MaxIssues is the most issues kept.
	MaxIssues = 100
	// MaxIssueBytes bounds the JSON size of the issues kept (about).
	MaxIssueBytes = 256 << 10
	// maxIssueString bounds each string of an issue (an instance path
	// through a huge key, a huge property name): cut with a marker.
	maxIssueString = 1024
)

func (c *issueConverter) convert(e *jsonschema.ValidationError) []toolerr.Issue {
	c.walk(e, nil)
	if c.omitted > 0 {
		c.issues = append(c.issues, omittedIssue(c.omitted))
	}
	return c.issues
}

// omittedIssue is the last issue of a capped list.
func omittedIssue(n int) toolerr.Issue {
	return toolerr.Issue{
		SchemaPath: "#",
		Params:     map[string]any{"omitted": n},
		Message:    fmt.Sprintf("… and %d more issues", n),
	}
}

// detachIssues returns issues that share no bytes with a borrowed
// document: every string copied, and cut to maxIssueString with a marker.
func detachIssues(in []toolerr.Issue) []toolerr.Issue {
	out := make([]toolerr.Issue, len(in))
	for i, is := range in {
		out[i] = toolerr.Issue{
			InstancePath: cutString(is.InstancePath),
			SchemaPath:   cutString(is.SchemaPath),
			Keyword:      cutString(is.Keyword),
			Message:      cutString(is.Message),
		}
		if is.Params != nil {
			out[i].Params = detachValue(is.Params).(map[string]any)
		}
	}
	return out
}

func detachValue(v any) any {
	switch x := v.(type) {
	case string:
		return cutString(x)
	case json.Number:
		return json.Number(strings.Clone(string(x)))
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[cutString(k)] = detachValue(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = detachValue(e)
		}
		return a
	case []string:
		a := make([]string, len(x))
		for i, e := range x {
			a[i] = cutString(e)
		}
		return a
	}
	return v
}

func cutString(s string) string {
	if len(s) <= maxIssueString {
		return strings.Clone(s)
	}
	return strings.ToValidUTF8(s[:maxIssueString], "") + fmt.Sprintf("…(%d bytes)", len(s))
}

// walk emits e's issues. inst, when non-nil, replaces the instance location
// of e and its causes (propertyNames validates the name as a separate
// document whose locations are empty).
func (c *issueConverter) walk(e *jsonschema.ValidationError, inst []string) {
	loc := e.InstanceLocation
	if inst != nil {
		loc = inst
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.Reference:
		c.walkAll(sortedCauses(e.Causes), inst)
	case *kind.AllOf:
		c.walkAll(e.Causes, inst)
	case *kind.AnyOf:
		c.walkAll(e.Causes, inst)
		c.add(loc, "anyOf", c.schemaPath(e, "anyOf"), map[string]any{}, "must match a schema in anyOf")
	case *kind.OneOf:
		var passing any // null when none passed, as in Ajv
		if len(k.Subschemas) == 0 {
			c.walkAll(e.Causes, inst)
		} else {
			passing = slices.Clone(k.Subschemas)
		}
		c.add(loc, "oneOf", c.schemaPath(e, "oneOf"), map[string]any{"passingSchemas": passing},
			"must match exactly one schema in oneOf")
	case *kind.PropertyNames:
		c.walkAll(sortedCauses(e.Causes), loc)
		// SchemaURL is already the propertyNames subschema.
		c.add(loc, "propertyNames", c.schemaPath(e), map[string]any{"propertyName": k.Property},
			"property name must be valid")
	case *kind.Contains:
		c.walkAll(sortedCauses(e.Causes), inst)
		c.containsIssue(e, loc, -1, -1)
	case *kind.MinContains:
		c.walkAll(sortedCauses(e.Causes), inst)
		c.containsIssue(e, loc, k.Want, -1)
	case *kind.MaxContains:
		c.containsIssue(e, loc, -1, k.Want)
	default:
		c.leaf(e, loc)
	}
}

func (c *issueConverter) walkAll(causes []*jsonschema.ValidationError, inst []string) {
	for _, cause := range causes {
		c.walk(cause, inst)
	}
}

func (c *issueConverter) add(loc []string, keyword, schemaPath string, params map[string]any, msg string) {
	if c.full() {
		c.omitted++
		return
	}
	tokens := loc
	if len(c.prefix) > 0 {
		tokens = append(slices.Clip(c.prefix), loc...)
	}
	c.issues = append(c.issues, toolerr.Issue{
		InstancePath: pointer(tokens),
		SchemaPath:   schemaPath,
		Keyword:      keyword,
		Params:       params,
		Message:      msg,
	})
	is := &c.issues[len(c.issues)-1]
	c.size += 64 + min(len(is.InstancePath), maxIssueString) + len(is.SchemaPath) + len(is.Message)
	if b, err := json.Marshal(params); err == nil {
		c.size += len(b)
	}
}

// full reports whether the issue list is at its bounds.
func (c *issueConverter) full() bool { return len(c.issues) >= MaxIssues || c.size > MaxIssueBytes }

func (c *issueConverter) leaf(e *jsonschema.ValidationError, loc []string) {
	if c.full() {
		// Count what would have been added without building it (paths
		// and params cost more than the library's error did).
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			c.omitted += len(k.Missing)
			return
		case *kind.AdditionalProperties:
			c.omitted += len(k.Properties)
			return
		case *kind.FalseSchema: // collapsed per parent: let falseSchema count
		default:
			c.omitted++
			return
		}
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		// Ajv: params.type is the schema's value — a string for one type,
		// the array for several — and the message joins them with commas.
		var param any = strings.Join(k.Want, ",")
		t := strings.Join(k.Want, ",")
		switch raw := c.raw(e, "type").(type) {
		case string:
			t, param = raw, raw
		case []any:
			names := make([]string, 0, len(raw))
			for _, n := range raw {
				if s, ok := n.(string); ok {
					names = append(names, s)
				}
			}
			t, param = strings.Join(names, ","), names
		}
		c.add(loc, "type", c.schemaPath(e, "type"), map[string]any{"type": param}, "must be "+t)
	case *kind.Enum:
		allowed := k.Want
		if raw, ok := c.raw(e, "enum").([]any); ok {
			allowed = raw
		}
		c.add(loc, "enum", c.schemaPath(e, "enum"), map[string]any{"allowedValues": deepCopy(allowed)},
			"must be equal to one of the allowed values")
	case *kind.Const:
		c.add(loc, "const", c.schemaPath(e, "const"), map[string]any{"allowedValue": deepCopy(k.Want)},
			"must be equal to constant")
	case *kind.Format:
		c.add(loc, "format", c.schemaPath(e, "format"), map[string]any{"format": k.Want},
			fmt.Sprintf("must match format %q", k.Want))
	case *kind.Pattern:
		c.add(loc, "pattern", c.schemaPath(e, "pattern"), map[string]any{"pattern": k.Want},
			`must match pattern "`+k.Want+`"`)
	case *kind.Required:
		for _, p := range k.Missing {
			c.add(loc, "required", c.schemaPath(e, "required"), map[string]any{"missingProperty": p},
				"must have required property '"+p+"'")
		}
	case *kind.AdditionalProperties:
		for _, p := range slices.Sorted(slices.Values(k.Properties)) {
			c.add(loc, "additionalProperties", c.schemaPath(e, "additionalProperties"),
				map[string]any{"additionalProperty": p}, "must NOT have additional properties")
		}
	case *kind.Dependency:
		c.dependency(e, loc, "dependencies", k.Prop, k.Missing)
	case *kind.DependentRequired:
		c.dependency(e, loc, "dependentRequired", k.Prop, k.Missing)
	case *kind.MinLength:
		c.limit(e, loc, "minLength", k.Want, "must NOT have fewer than %d characters")
	case *kind.MaxLength:
		c.limit(e, loc, "maxLength", k.Want, "must NOT have more than %d characters")
	case *kind.MinItems:
		c.limit(e, loc, "minItems", k.Want, "must NOT have fewer than %d items")
	case *kind.MaxItems:
		c.limit(e, loc, "maxItems", k.Want, "must NOT have more than %d items")
	case *kind.MinProperties:
		c.limit(e, loc, "minProperties", k.Want, "must NOT have fewer than %d properties")
	case *kind.MaxProperties:
		c.limit(e, loc, "maxProperties", k.Want, "must NOT have more than %d properties")
	case *kind.Minimum:
		c.compare(e, loc, "minimum", ">=", k.Want)
	case *kind.Maximum:
		c.compare(e, loc, "maximum", "<=", k.Want)
	case *kind.ExclusiveMinimum:
		c.compare(e, loc, "exclusiveMinimum", ">", k.Want)
	case *kind.ExclusiveMaximum:
		c.compare(e, loc, "exclusiveMaximum", "<", k.Want)
	case *kind.MultipleOf:
		n := jsNumber(k.Want)
		c.add(loc, "multipleOf", c.schemaPath(e, "multipleOf"), map[string]any{"multipleOf": n},
			"must be multiple of "+string(n))
	case *kind.UniqueItems:
		i, j := k.Duplicates[1], k.Duplicates[0]
		if arr, ok := lookup(c.instance, loc).([]any); ok {
			i, j = ajvDuplicates(arr, i, j)
		}
		c.add(loc, "uniqueItems", c.schemaPath(e, "uniqueItems"), map[string]any{"i": i, "j": j},
			fmt.Sprintf("must NOT have duplicate items (items ## %d and %d are identical)", j, i))
	case *kind.AdditionalItems:
		n := 0
		if arr, ok := lookup(c.instance, loc).([]any); ok {
			n = len(arr) - k.Count
		}
		c.limit(e, loc, "additionalItems", n, "must NOT have more than %d items")
	case *kind.Not:
		c.add(loc, "not", c.schemaPath(e, "not"), map[string]any{}, "must NOT be valid")
	case *kind.FalseSchema:
		c.falseSchema(e, loc)
	default:
		// Keywords without an Ajv counterpart here (content*, extensions,
		// reference cycles): keep the library's wording.
		kw := ""
		if p := e.ErrorKind.KeywordPath(); len(p) > 0 {
			kw = p[0]
		}
		single := &jsonschema.ValidationError{ErrorKind: e.ErrorKind, InstanceLocation: nil}
		msg := single.Error()
		if _, after, ok := strings.Cut(msg, ": "); ok {
			msg = after
		}
		c.add(loc, kw, c.schemaPath(e, e.ErrorKind.KeywordPath()...), map[string]any{}, msg)
	}
}

func (c *issueConverter) limit(e *jsonschema.ValidationError, loc []string, keyword string, n int, format string) {
	c.add(loc, keyword, c.schemaPath(e, keyword), map[string]any{"limit": n}, fmt.Sprintf(format, n))
}

func (c *issueConverter) compare(e *jsonschema.ValidationError, loc []string, keyword, op string, want *big.Rat) {
	n := jsNumber(want)
	c.add(loc, keyword, c.schemaPath(e, keyword), map[string]any{"comparison": op, "limit": n},
		"must be "+op+" "+string(n))
}

func (c *issueConverter) dependency(e *jsonschema.ValidationError, loc []string, keyword, prop string, missing []string) {
	deps := missing
	if raw, ok := c.raw(e, keyword, prop).([]any); ok {
		deps = nil
		for _, d := range raw {
			if s, ok := d.(string); ok {
				deps = append(deps, s)
			}
		}
	}
	word := "properties"
	if len(deps) == 1 {
		word = "property"
	}
	joined := strings.Join(deps, ", ")
	for _, m := range missing {
		c.add(loc, keyword, c.schemaPath(e, keyword), map[string]any{
			"property": prop, "missingProperty": m, "depsCount": len(deps), "deps": joined,
		}, fmt.Sprintf("must have %s %s when property %s is present", word, joined, prop))
	}
}

// containsIssue reports contains/minContains/maxContains as Ajv does: one
// "contains" issue carrying both bounds.
func (c *issueConverter) containsIssue(e *jsonschema.ValidationError, loc []string, lo, hi int) {
	if lo < 0 {
		lo = 1
		if n, ok := rawInt(c.raw(e, "minContains")); ok {
			lo = n
		}
	}
	if hi < 0 {
		if n, ok := rawInt(c.raw(e, "maxContains")); ok {
			hi = n
		}
	}
	params := map[string]any{"minContains": lo}
	msg := fmt.Sprintf("must contain at least %d valid item(s)", lo)
	if hi >= 0 {
		params["maxContains"] = hi
		msg = fmt.Sprintf("must contain at least %d and no more than %d valid item(s)", lo, hi)
	}
	c.add(loc, "contains", c.schemaPath(e, "contains"), params, msg)
}

// falseSchema maps a failed boolean schema. Where Ajv reports the keyword
// that holds it (items: false after prefixItems, unevaluatedProperties:
// false, ...) on the parent, so does this, once per parent.
func (c *issueConverter) falseSchema(e *jsonschema.ValidationError, loc []string) {
	base, frag := splitURL(e.SchemaURL)
	tokens := fragmentTokens(frag)
	if base == c.docURL && len(tokens) > 0 && len(loc) > 0 {
		roles := classify(tokens)
		last := tokens[len(tokens)-1]
		if roles[len(roles)-1] == roleKeyword {
			parent := loc[:len(loc)-1]
			sp := c.schemaPath(e)
			key := pointer(parent) + "\x00" + sp
			switch last {
			case "items", "additionalItems", "unevaluatedItems":
				if !c.collapse(key) {
					n, _ := strconv.Atoi(loc[len(loc)-1])
					c.add(parent, last, sp, map[string]any{"limit": n}, fmt.Sprintf("must NOT have more than %d items", n))
				}
				return
			case "unevaluatedProperties":
				c.add(parent, last, sp, map[string]any{"unevaluatedProperty": loc[len(loc)-1]},
					"must NOT have unevaluated properties")
				return
			}
		}
	}
	c.add(loc, "false schema", c.schemaPath(e, "false schema"), map[string]any{}, "boolean schema is false")
}

func (c *issueConverter) collapse(key string) bool {
	if c.collapsed == nil {
		c.collapsed = map[string]bool{}
	}
	if c.collapsed[key] {
		return true
	}
	c.collapsed[key] = true
	return false
}

// raw returns the raw value at the error's schema location plus path, when
// the schema is the converter's own document.
func (c *issueConverter) raw(e *jsonschema.ValidationError, path ...string) any {
	base, frag := splitURL(e.SchemaURL)
	if base != c.docURL || c.schemaDoc == nil {
		return nil
	}
	return lookup(c.schemaDoc, append(fragmentTokens(frag), path...))
}

// schemaPath renders the Ajv schemaPath of e plus keyword tokens: a URI
// fragment ("#/properties/a/type") when e is in the converter's document,
// the absolute URL otherwise. As in Ajv, property names are
// URI-component-encoded and keywords are not.
func (c *issueConverter) schemaPath(e *jsonschema.ValidationError, keyword ...string) string {
	base, frag := splitURL(e.SchemaURL)
	tokens := append(fragmentTokens(frag), keyword...)
	roles := classify(tokens)
	var sb strings.Builder
	if base != c.docURL {
		sb.WriteString(base)
	}
	sb.WriteByte('#')
	for i, t := range tokens {
		sb.WriteByte('/')
		if roles[i] == roleName {
			sb.WriteString(encodeURIComponent(escapePointerToken(t)))
		} else {
			sb.WriteString(escapePointerToken(t))
		}
	}
	return sb.String()
}

// --- ordering ---

func sortedCauses(causes []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(causes) < 2 {
		return causes
	}
	type keyed struct {
		e    *jsonschema.ValidationError
		rank int
		sch  []string
	}
	ks := make([]keyed, len(causes))
	for i, e := range causes {
		_, frag := splitURL(e.SchemaURL)
		sch := fragmentTokens(frag)
		kw := ""
		switch k := e.ErrorKind.(type) {
		case *kind.Group, *kind.Schema:
			roles := classify(sch)
			for j := len(sch) - 1; j >= 0; j-- {
				if roles[j] == roleKeyword {
					kw = sch[j]
					break
				}
			}
		case *kind.Reference:
			kw = k.Keyword
		case *kind.FalseSchema:
			kw = "false schema"
		default:
			p := e.ErrorKind.KeywordPath()
			if len(p) > 0 {
				kw = p[0]
			}
			sch = append(sch, p...)
		}
		ks[i] = keyed{e, keywordRank(kw), sch}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		if c := compareTokens(a.e.InstanceLocation, b.e.InstanceLocation); c != 0 {
			return c
		}
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return compareTokens(a.sch, b.sch)
	})
	out := make([]*jsonschema.ValidationError, len(ks))
	for i, k := range ks {
		out[i] = k.e
	}
	return out
}

// ajvOrder lists keywords in the order Ajv evaluates them.
var ajvOrder = []string{
	"false schema", "$ref", "$dynamicRef", "$recursiveRef", "type",
	"maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum", "multipleOf",
	"maxLength", "minLength", "pattern", "format",
	"maxProperties", "minProperties", "required", "dependentRequired",
	"maxItems", "minItems", "uniqueItems", "const", "enum",
	"additionalItems", "prefixItems", "items", "contains", "minContains", "maxContains",
	"dependencies", "propertyNames", "additionalProperties", "properties", "patternProperties",
	"dependentSchemas", "not", "anyOf", "oneOf", "allOf", "if", "then", "else",
	"unevaluatedProperties", "unevaluatedItems",
}

func keywordRank(kw string) int {
	if i := slices.Index(ajvOrder, kw); i >= 0 {
		return i
	}
	return len(ajvOrder)
}

// compareTokens orders JSON Pointer token lists: token by token, numbers
// numerically, a prefix first.
func compareTokens(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		na, errA := strconv.Atoi(a[i])
		nb, errB := strconv.Atoi(b[i])
		if errA == nil && errB == nil && na != nb {
			if na < nb {
				return -1
			}
			return 1
		}
		return strings.Compare(a[i], b[i])
	}
	return len(a) - len(b)
}

// --- schema pointers ---

type role uint8

const (
	roleKeyword role = iota
	roleName         // a property or definition name
	roleIndex        // an index into allOf/anyOf/oneOf/prefixItems/items
	roleData         // inside something that is not a schema
)

var (
	mapKeywords = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
	arrKeywords = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	subKeywords = []string{"not", "if", "then", "else", "items", "additionalItems", "additionalProperties",
		"contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contentSchema"}
)

// classify tells, for each token of a pointer into a schema, whether it is a
// keyword, a name under a map keyword, or an index.
func classify(tokens []string) []role {
	roles := make([]role, len(tokens))
	state := roleKeyword
	for i, t := range tokens {
		roles[i] = state
		switch state {
		case roleKeyword:
			switch {
			case slices.Contains(mapKeywords, t):
				state = roleName
			case slices.Contains(arrKeywords, t):
				state = roleIndex
			case t == "items" && i+1 < len(tokens) && isIndex(tokens[i+1]):
				state = roleIndex
			case slices.Contains(subKeywords, t):
				state = roleKeyword
			default:
				state = roleData
			}
		case roleName, roleIndex:
			state = roleKeyword
		}
	}
	return roles
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// splitURL splits a schema location into its URL and its (unescaped) JSON
// Pointer fragment.
func splitURL(loc string) (string, string) {
	base, frag, _ := strings.Cut(loc, "#")
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	return base, frag
}

// fragmentTokens splits a JSON Pointer into unescaped tokens.
func fragmentTokens(ptr string) []string {
	if ptr == "" || ptr[0] != '/' {
		return nil
	}
	toks := strings.Split(ptr[1:], "/")
	for i, t := range toks {
		if strings.Contains(t, "~") {
			t = strings.ReplaceAll(t, "~1", "/")
			toks[i] = strings.ReplaceAll(t, "~0", "~")
		}
	}
	return toks
}

// lookup follows tokens into a decoded JSON value (nil when absent).
func lookup(v any, tokens []string) any {
	for _, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			v = x[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// encodeURIComponent is JavaScript's encodeURIComponent, as Ajv applies it
// to property names in schemaPath.
func encodeURIComponent(s string) string {
	const keep = "-_.!~*'()"
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte(keep, b) >= 0 {
			sb.WriteByte(b)
			continue
		}
		sb.WriteByte('%')
		sb.WriteByte("0123456789ABCDEF"[b>>4])
		sb.WriteByte("0123456789ABCDEF"[b&15])
	}
	return sb.String()
}

// --- values ---

// jsNumber renders r as JavaScript's Number#toString would, as a JSON
// number (Ajv's limits are JS numbers).
func jsNumber(r *big.Rat) json.Number {
	if r.IsInt() && r.Num().IsInt64() {
		if n := r.Num().Int64(); n > -1<<53 && n < 1<<53 {
			return json.Number(strconv.FormatInt(n, 10))
		}
	}
	f, _ := r.Float64()
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return json.Number(r.FloatString(0))
	}
	abs := math.Abs(f)
	if f == 0 || (abs >= 1e-6 && abs < 1e21) {
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // 1e+21, 1e-07
	mant, exp, _ := strings.Cut(s, "e")
	sign := exp[0]
	exp = strings.TrimLeft(exp[1:], "0")
	return json.Number(mant + "e" + string(sign) + exp)
}

func rawInt(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(string(n))
	return i, err == nil
}

// ajvDuplicates finds the pair Ajv's uniqueItems reports: the largest index
// i equal to an earlier item, and the largest such earlier index j.
func ajvDuplicates(arr []any, i0, j0 int) (int, int) {
	last := make(map[string]int, len(arr))
	i, j := i0, j0
	found := false
	for idx, v := range arr {
		key := string(canonicalJSON(nil, v))
		if prev, ok := last[key]; ok {
			i, j, found = idx, prev, true
		}
		last[key] = idx
	}
	if !found {
		return i0, j0
	}
	return i, j
}

// canonicalJSON encodes v so that JSON-Schema-equal values encode equally
// (sorted keys, numbers as exact rationals).
func canonicalJSON(b []byte, v any) []byte {
	switch v := v.(type) {
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(v)); ok {
			return append(append(b, 'n'), r.RatString()...)
		}
		return append(b, v...)
	case []any:
		b = append(b, '[')
		for _, e := range v {
			b = canonicalJSON(b, e)
			b = append(b, ',')
		}
		return append(b, ']')
	case map[string]any:
		b = append(b, '{')
		for _, k := range slices.Sorted(maps.Keys(v)) {
			b = appendString(b, k)
			b = append(b, ':')
			b = canonicalJSON(b, v[k])
			b = append(b, ',')
		}
		return append(b, '}')
	default:
		return appendJSON(b, v)
	}
}

// deepCopy copies a decoded JSON value so callers cannot alias schema data.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = deepCopy(e)
		}
		return a
	default:
		return v
	}
}
