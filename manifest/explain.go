package manifest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/internal/suggest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// explain renders issues as sentences that say what to change. The issues
// themselves (the Ajv objects on the wire) are not altered; only the human
// text is:
//
//   - a oneOf discriminated by "kind" is reported for the branch the
//     document's kind selects, never with the other branches' problems; a
//     kind no branch has is one line listing the kinds there are
//     (`codeArtifactRef/kind must be "oci" or "filesystem" (got "file")`);
//   - an oneOf/anyOf summary is dropped when a problem inside it is shown;
//   - enum and const name the allowed values, with the nearest one;
//   - an unknown property gets the nearest property the schema has;
//   - a pattern the tool schema uses gives an example;
//   - a value the document has is quoted as "got".
//
// doc is the document validated (nil: no "got", no discriminator); schema
// is the schema document as generic JSON (nil: no property suggestions).
func explain(dataVar string, doc, schema any, issues []toolerr.Issue) []string {
	issues = selectBranches(doc, schema, issues)
	// A required property that an unknown one is a misspelling of is said
	// once, on the unknown property.
	suggested := map[string]bool{} // instancePath + "\x00" + property
	for _, is := range issues {
		if is.Keyword == "additionalProperties" {
			if n := suggestProperty(schema, is); n != "" {
				suggested[is.InstancePath+"\x00"+n] = true
			}
		}
	}
	lines := make([]string, 0, len(issues))
	for i, is := range issues {
		if (is.Keyword == "oneOf" || is.Keyword == "anyOf") && hasInner(issues, i) {
			continue
		}
		if name, _ := is.Params["missingProperty"].(string); is.Keyword == "required" && suggested[is.InstancePath+"\x00"+name] {
			continue
		}
		line := sentence(dataVar, doc, schema, is)
		if !contains(lines, line) { // a $ref'd subschema shared by branches reports once
			lines = append(lines, line)
		}
	}
	return lines
}

// suggestProperty returns the property an unknown one is probably meant
// to be, from the schema's properties at that location, or "".
func suggestProperty(schema any, is toolerr.Issue) string {
	name, _ := is.Params["additionalProperty"].(string)
	props := propertyNames(schemaAt(schema, strings.TrimSuffix(is.SchemaPath, "/additionalProperties")))
	if a, ok := propertyAliases[name]; ok && contains(props, a) {
		return a
	}
	return suggest.Nearest(name, props)
}

// hasInner reports whether another issue of the list lies at or under the
// instance location of issues[i] (issues[i] being a oneOf/anyOf summary).
func hasInner(issues []toolerr.Issue, i int) bool {
	p := issues[i].InstancePath
	for j, o := range issues {
		if j != i && o.Keyword != "oneOf" && o.Keyword != "anyOf" && (o.InstancePath == p || strings.HasPrefix(o.InstancePath, p+"/")) {
			return true
		}
	}
	return false
}

// selectBranches applies the "kind" discriminator to every failed oneOf
// whose branches each fix "kind" (const or enum) in the schema: only the
// branch whose kind the document has keeps its issues; when no branch has
// it, the group becomes one issue listing the kinds there are.
func selectBranches(doc, schema any, issues []toolerr.Issue) []toolerr.Issue {
	for gi := 0; gi < len(issues); gi++ {
		g := issues[gi]
		if g.Keyword != "oneOf" {
			continue
		}
		kinds := branchKinds(schema, g.SchemaPath)
		if kinds == nil {
			continue
		}
		v, _ := valueAt(doc, g.InstancePath+"/kind")
		kind, ok := v.(string)
		if !ok {
			continue // no kind, or not a string: the plain issues say so
		}
		selected := -1
		var allowed []string
		for n, ks := range kinds {
			allowed = append(allowed, ks...)
			if contains(ks, kind) {
				selected = n
			}
		}
		prefix := g.SchemaPath + "/"
		out := make([]toolerr.Issue, 0, len(issues))
		for i, is := range issues {
			if rest, ok := strings.CutPrefix(is.SchemaPath, prefix); ok {
				idx, _, _ := strings.Cut(rest, "/")
				if n, err := strconv.Atoi(idx); err == nil && n != selected {
					continue
				}
			}
			if i == gi {
				if selected < 0 {
					out = append(out, toolerr.Issue{InstancePath: g.InstancePath + "/kind", Keyword: "enum", Params: map[string]any{"allowedValues": toAny(allowed)}, Message: "must be equal to one of the allowed values"})
				}
				continue // the summary goes: the branch's own issues say what is wrong
			}
			out = append(out, is)
		}
		issues = out
		gi = -1 // indices moved; a collapsed group has no oneOf issue left
	}
	return issues
}

// branchKinds returns, per branch of the oneOf at schemaPath, the values
// its "kind" property allows (const or enum, following one local $ref),
// or nil unless every branch fixes kind.
func branchKinds(schema any, schemaPath string) [][]string {
	arr, _ := schemaAt(schema, schemaPath).([]any)
	if len(arr) < 2 {
		return nil
	}
	out := make([][]string, len(arr))
	for n, b := range arr {
		obj, _ := b.(map[string]any)
		if ref, ok := obj["$ref"].(string); ok {
			obj, _ = schemaAt(schema, ref).(map[string]any)
		}
		props, _ := obj["properties"].(map[string]any)
		k, _ := props["kind"].(map[string]any)
		if c, ok := k["const"].(string); ok {
			out[n] = []string{c}
			continue
		}
		enum, _ := k["enum"].([]any)
		for _, e := range enum {
			if s, ok := e.(string); ok {
				out[n] = append(out[n], s)
			}
		}
		if len(out[n]) == 0 {
			return nil
		}
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// allowedOf returns the values a const or enum issue allows, as strings.
func allowedOf(is toolerr.Issue) []string {
	var out []string
	if v, ok := is.Params["allowedValue"]; ok {
		out = append(out, fmt.Sprint(v))
	}
	if vs, ok := is.Params["allowedValues"].([]any); ok {
		for _, v := range vs {
			out = append(out, fmt.Sprint(v))
		}
	}
	return out
}

// schemaAt resolves a "#/a/b" schema path in schema (nil when it does not
// resolve, or names another document).
func schemaAt(schema any, schemaPath string) any {
	if schema == nil {
		return nil
	}
	frag, ok := strings.CutPrefix(schemaPath, "#")
	if !ok {
		return nil
	}
	v := schema
	if frag == "" {
		return v
	}
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch n := v.(type) {
		case map[string]any:
			v = n[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n) {
				return nil
			}
			v = n[i]
		default:
			return nil
		}
	}
	return v
}

// valueAt returns the value at a JSON Pointer in doc.
func valueAt(doc any, ptr string) (any, bool) {
	if doc == nil {
		return nil, false
	}
	if ptr == "" {
		return doc, true
	}
	v := doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch n := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = n[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n) {
				return nil, false
			}
			v = n[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// patternExamples are values that match the patterns the tool schema uses.
var patternExamples = map[string]string{
	`^\d+\.\d+\.\d+$`: "1.0.0",
}

// propertyAliases are names users bring from neighbouring formats, with
// this format's name for the same thing.
var propertyAliases = map[string]string{
	"inputSchema":  "input", // MCP's tool definition
	"outputSchema": "output",
	"name":         "id",
	"limit":        "limits",
	"artifactRef":  "codeArtifactRef",
	"posture":      "sandbox",
}

func sentence(dataVar string, doc, schema any, is toolerr.Issue) string {
	where := dataVar + is.InstancePath
	got := ""
	if v, ok := valueAt(doc, is.InstancePath); ok {
		got = " (got " + short(v) + ")"
	}
	switch is.Keyword {
	case "enum", "const":
		allowed := allowedOf(is)
		quoted := make([]string, len(allowed))
		for i, a := range allowed {
			quoted[i] = strconv.Quote(a)
		}
		s := where + " must be " + orList(quoted)
		if v, ok := valueAt(doc, is.InstancePath); ok {
			if str, ok := v.(string); ok {
				if n := suggest.Nearest(str, allowed); n != "" && len(allowed) > 1 {
					return s + " (got " + short(v) + "; did you mean " + strconv.Quote(n) + "?)"
				}
			}
		}
		return s + got
	case "additionalProperties":
		name, _ := is.Params["additionalProperty"].(string)
		s := fmt.Sprintf("%s has an unknown property %q", where, name)
		if n := suggestProperty(schema, is); n != "" {
			return s + " (did you mean " + strconv.Quote(n) + "?)"
		}
		props := propertyNames(schemaAt(schema, strings.TrimSuffix(is.SchemaPath, "/additionalProperties")))
		if len(props) > 0 && len(props) <= 12 {
			q := make([]string, len(props))
			for i, p := range props {
				q[i] = strconv.Quote(p)
			}
			return s + " (it may have " + strings.Join(q, ", ") + ")"
		}
		return s
	case "required":
		name, _ := is.Params["missingProperty"].(string)
		return fmt.Sprintf("%s is missing the required property %q", where, name)
	case "pattern":
		pat, _ := is.Params["pattern"].(string)
		if ex, ok := patternExamples[pat]; ok {
			return where + " must look like " + ex + got
		}
		return where + " must match the pattern " + pat + got
	}
	s := where + " " + is.Message
	if is.Keyword == "type" {
		s += got
	}
	return s
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// propertyNames lists the "properties" of a schema object, sorted.
func propertyNames(schema any) []string {
	obj, _ := schema.(map[string]any)
	props, _ := obj["properties"].(map[string]any)
	out := make([]string, 0, len(props))
	for k := range props {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func orList(q []string) string {
	switch len(q) {
	case 0:
		return "one of the allowed values"
	case 1:
		return q[0]
	case 2:
		return q[0] + " or " + q[1]
	}
	return "one of " + strings.Join(q, ", ")
}

// short renders a document value for a message: strings quoted, other
// values as JSON, cut to 40 bytes.
func short(v any) string {
	var s string
	switch x := v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		s = strconv.Quote(x)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "a value"
		}
		s = string(b)
	}
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}

// toolSchemaDoc is the embedded tool schema as generic JSON, for the
// property names explain suggests.
var toolSchemaDoc = sync.OnceValue(func() any {
	var v any
	if err := json.Unmarshal(toolSchemaJSON, &v); err != nil {
		panic("manifest: embedded tool schema: " + err.Error())
	}
	return v
})
