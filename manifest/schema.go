package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sandboxd/sandboxd/toolerr"
)

// docURL is the URL every schema document is compiled under. Each document
// gets its own compiler, so a relative $ref never reaches another document:
// it resolves to another sandboxd:/// URL, which nothing loads.
const docURL = "sandboxd:///schema.json"

// Schema is a compiled JSON Schema. It is immutable and safe for concurrent
// use by many goroutines.
type Schema struct {
	sch   *jsonschema.Schema          // the first compiled copy (fill, reach, checks), never validated with
	pool  *copyPool                   // meter.go: copies for validations
	doc   any                         // the decoded schema document, never mutated
	reach map[*jsonschema.Schema]bool // subschemas leading to a default (nil: none)
	fast  *fastObject                 // fastpath.go; nil when the schema is not of its shape
	leaf  int64                       // meter.go: the heaviest ownWeight of any subschema
}

// dialects a schema may declare with $schema.
type dialectRule int

const (
	// only2020: Kindgi tool schemas "MUST validate under Draft 2020-12".
	only2020 dialectRule = iota
	// mcpDialects: an MCP server's tool schemas are in the dialect their
	// $schema declares: draft-06, draft-07, 2019-09 or 2020-12.
	mcpDialects
)

// CompileSchema compiles raw, a JSON Schema in draft 2020-12, as found at
// pointer (a JSON Pointer into the manifest such as "/needsSpec/env/TOKEN",
// used in error messages). Remote references are never fetched. Failure is a
// *toolerr.Error with Code toolerr.InvalidToolDefinition and Details
// {"pointer": ...} naming the offending location.
func CompileSchema(pointer string, raw json.RawMessage) (*Schema, error) {
	d, err := decodeJSON(raw, decodeOpts{maxDepth: maxSchemaDepth, rejectDuplicates: true})
	if err != nil {
		return nil, &toolerr.Error{
			Code:    toolerr.InvalidToolDefinition,
			Message: jsonProblem("schema at "+displayPointer(pointer), err),
			Details: map[string]any{"pointer": pointer},
			Err:     err,
		}
	}
	return compileSchema(pointer, d.v, only2020)
}

func displayPointer(p string) string {
	if p == "" {
		return `""`
	}
	return p
}

// compileSchema compiles an already decoded schema document. doc is kept
// and must not be mutated afterwards.
func compileSchema(pointer string, doc any, rule dialectRule) (s *Schema, err error) {
	if terr := checkDialect(pointer, doc, rule); terr != nil {
		return nil, terr
	}
	if n := countContainers(doc, maxSchemaNodes+1); n > maxSchemaNodes {
		return nil, invalidSchema(pointer, pointer, fmt.Sprintf("schema is too large: more than %d objects and arrays", maxSchemaNodes), nil, nil)
	}
	defer func() {
		// The library is not written for hostile schemas; never let one
		// take the daemon down.
		if r := recover(); r != nil {
			s, err = nil, invalidSchema(pointer, pointer, fmt.Sprintf("schema could not be compiled: %v", r), nil, nil)
		}
	}()
	first, err := compileCopy(doc)
	var aerr addResourceError
	if errors.As(err, &aerr) {
		return nil, invalidSchema(pointer, pointer, aerr.err.Error(), nil, aerr.err)
	}
	if err != nil {
		return nil, compileError(pointer, doc, err)
	}
	sch := first.sch
	if at, ok := checkCounts(doc, sch); ok {
		return nil, invalidSchema(pointer, pointer+at, fmt.Sprintf("value is too large (more than %d)", math.MaxInt32), nil, nil)
	}
	if loc, ok := sameValueCycle(sch); ok {
		at := pointer + ptrOf(loc)
		return nil, invalidSchema(pointer, at, "reference cycle: the schema at "+displayPointer(at)+" applies itself to the same value (validation would never end)", nil, nil)
	}
	if cost(sch) > maxSchemaCost {
		return nil, invalidSchema(pointer, pointer, "schema is too complex: validating one value would evaluate more than 1000000 subschemas", nil, nil)
	}
	// The first copy (sch) is never validated with: fill and defaultsReach
	// use it while other goroutines validate, and its regular expressions
	// must charge nothing. The pool starts with one copy of its own.
	pool := &copyPool{build: func() (*meteredCopy, error) { return compileCopy(doc) }}
	c, err := pool.build()
	if err != nil {
		return nil, invalidSchema(pointer, pointer, "schema could not be compiled again: "+err.Error(), nil, err)
	}
	pool.put(c)
	return &Schema{sch: sch, pool: pool, doc: doc, reach: defaultsReach(sch), fast: compileFast(doc), leaf: leafWeight(sch)}, nil
}

// addResourceError is compileCopy's error when doc is not a schema resource.
type addResourceError struct{ err error }

func (e addResourceError) Error() string { return e.err.Error() }

// compileCopy compiles doc with the meter's vocabulary bound to a new slot.
func compileCopy(doc any) (*meteredCopy, error) {
	slot := &meterSlot{}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	c.RegisterVocabulary(meterVocabulary(slot))
	c.UseRegexpEngine(meteredRegexpEngine(slot))
	c.AssertVocabs() // the meter is active whatever the $schema's $vocabulary says
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, addResourceError{err}
	}
	sch, err := c.Compile(docURL)
	if err != nil {
		return nil, err
	}
	return &meteredCopy{sch: sch, slot: slot}, nil
}

// DefaultValidationBudget is the validation budget of Validate (and of
// Tool.ValidateInput and Tool.ValidateOutput): validating one document may
// hold at most about this many bytes (see ValueCost), whatever its size.
const DefaultValidationBudget = 256 << 20

// ErrValidationBudget is matched (errors.Is) by the error of a document
// that validating would need more memory for than its budget allows. It is
// refused before the validator runs; its toolerr.Error is the usual
// input- or output-validation-failed with a "is refused" message.
var ErrValidationBudget = errors.New("validation budget exceeded")

// Validate is ValidateWithin with DefaultValidationBudget.
func (s *Schema) Validate(doc []byte, fillDefaults bool) (out []byte, issues []toolerr.Issue, err error) {
	return s.ValidateWithin(doc, fillDefaults, DefaultValidationBudget)
}

// ValidateWithin is ValidateLimited with the work budget DefaultWorkLimit
// and no Check.
func (s *Schema) ValidateWithin(doc []byte, fillDefaults bool, budget int64) (out []byte, issues []toolerr.Issue, err error) {
	return s.ValidateLimited(doc, fillDefaults, budget, Work{})
}

// ValidateLimited validates doc, which must be exactly one JSON value,
// against s, holding at most about budget bytes while doing so (budget <= 0:
// DefaultValidationBudget) and spending at most w.Limit units of work
// (meter.go: about one per schema applied to a value), calling w.Check
// about every fraction of a millisecond of work. Over the work limit the
// validation stops with a *WorkError (errors.Is ErrWorkBudget); when
// w.Check returns an error it stops with that error. Either way it stops
// at once, and out and issues are nil. w.Check is also called while the
// document is decoded, after about every 64 KiB of it (so a document of
// hundreds of MiB stops as soon as the check does; a document not larger
// is decoded without a call). The cost is estimated while decoding, before
// the validator runs: ValueCost per JSON value (its tree node and the
// validator error it may produce) plus the bytes of strings that must be
// copied; a document over the budget fails with an error matching
// ErrValidationBudget, having cost at most the budget. A schema that
// accepts everything ({}, true, annotations only) is checked without a
// tree when no defaults are filled.
//
// With fillDefaults, missing properties that have a schema default are
// filled first (see Tool.ValidateInput), and out is the document a consumer
// must see: doc itself (the same slice) when nothing was filled, else the
// re-encoded document (compact, keys sorted, numbers as written). out is
// also re-encoded when doc repeats an object key (the last value, which is
// what was validated, is kept) or holds invalid UTF-8 (replaced by U+FFFD),
// so that a consumer never sees something else than what was validated.
// Without fillDefaults, out is doc.
//
// issues is empty when doc is valid; otherwise it lists Ajv-shaped
// problems in a deterministic order (a failure inside the validator itself
// becomes one issue, never a panic), at most MaxIssues of them and about
// MaxIssueBytes of JSON, the last one then saying how many more there were
// (keyword "", params {"omitted": N}). err is non-nil only when doc is not
// one JSON value or exceeds the decoder's limits: nesting deeper than 10000,
// a number literal longer than 1000 characters or with an exponent beyond
// ±10000 (exact comparison of such numbers would cost minutes of CPU), or
// the budget.
func (s *Schema) ValidateLimited(doc []byte, fillDefaults bool, budget int64, w Work) (out []byte, issues []toolerr.Issue, err error) {
	if budget <= 0 {
		budget = DefaultValidationBudget
	}
	if !fillDefaults && s.acceptsAll() {
		if _, err := decodeJSON(doc, decodeOpts{discard: true, check: w.Check}); err != nil {
			return nil, nil, err
		}
		return doc, nil, nil
	}
	// The fast path reads a document without ticks: a large one (whose
	// decoding costs as much as the fast path saves) goes to the decoder,
	// which calls w.Check as it reads.
	if s.fast != nil && s.reach == nil && (w.Check == nil || len(doc) <= tickBytes) && s.fast.valid(doc, budget) {
		return doc, nil, nil // what the full path returns for it (fastpath.go)
	}
	// The tree borrows doc's bytes: it is dropped before Validate returns
	// (defaults are re-encoded into new bytes); issues are detached from it
	// (their strings copied).
	d, err := decodeJSON(doc, decodeOpts{borrow: true, budget: budget, check: w.Check})
	if err != nil {
		return nil, nil, err
	}
	m := newMeter(w)
	m.heavyNum = d.heavyNum
	if values := d.cost / ValueCost; values > 0 && values*s.leaf > m.limit {
		// Assertions that fail before the library reaches the meter are
		// charged after their container's loop: refuse up front what
		// such a loop could cost (values × the heaviest assertion).
		return nil, nil, &WorkError{Limit: m.limit}
	}
	defer func() {
		if err != nil {
			out, issues = nil, nil
		}
	}()
	defer recoverStop(&err)
	m.add(0) // Check before any work
	out = doc
	if fillDefaults {
		if s.fill(d.v, m) || d.needsReencode() {
			out = encodeJSON(d.v)
		}
	}
	if issues = s.validate(d.v, m); len(issues) == 0 {
		return out, nil, nil
	}
	return out, detachIssues(issues), nil
}

// annotations are the keywords that never make a value invalid.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "$anchor": true, "$dynamicAnchor": true,
	"$defs": true, "definitions": true, "title": true, "description": true, "default": true,
	"examples": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// acceptsAll reports whether the schema is true, {} or annotations only.
func (s *Schema) acceptsAll() bool {
	switch d := s.doc.(type) {
	case bool:
		return d
	case map[string]any:
		for k := range d {
			if !annotations[k] {
				return false
			}
		}
		return true
	}
	return false
}

// fill inserts defaults into v and reports whether it inserted any.
func (s *Schema) fill(v any, m *meter) bool {
	if s.reach == nil {
		return false
	}
	f := filler{reach: s.reach, m: m}
	f.fill(s.sch, v, 0, nil)
	return f.filled
}

// validate validates a decoded document on a compiled copy of its own,
// charging m, and converts the failure. A stopped validation unwinds
// through it (meter.go).
func (s *Schema) validate(v any, m *meter) (issues []toolerr.Issue) {
	c, err := s.pool.get()
	if err != nil {
		return []toolerr.Issue{{SchemaPath: "#", Params: map[string]any{}, Message: fmt.Sprintf("validation failed: %v", err)}}
	}
	c.slot.m = m
	defer s.pool.put(c)
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); ok {
				panic(r)
			}
			issues = []toolerr.Issue{{
				SchemaPath: "#",
				Params:     map[string]any{},
				Message:    fmt.Sprintf("validation failed: %v", r),
			}}
		}
	}()
	err = c.sch.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []toolerr.Issue{{SchemaPath: "#", Params: map[string]any{}, Message: err.Error()}}
	}
	conv := issueConverter{docURL: docURL, schemaDoc: s.doc, instance: v}
	return conv.convert(verr)
}

// checkDialect enforces rule on the document's $schema.
func checkDialect(pointer string, doc any, rule dialectRule) *toolerr.Error {
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil
	}
	v, ok := obj["$schema"]
	if !ok {
		return nil
	}
	at := pointer + "/$schema"
	s, ok := v.(string)
	if !ok {
		return invalidSchema(pointer, at, "$schema must be a string", nil, nil)
	}
	d := dialectOf(s)
	switch {
	case d == "2020-12":
		return nil
	case rule == mcpDialects && (d == "draft-06" || d == "draft-07" || d == "2019-09"):
		return nil
	case rule == mcpDialects:
		return invalidSchema(pointer, at, fmt.Sprintf("$schema %q is not a supported dialect (draft-06, draft-07, 2019-09 or 2020-12)", s), nil, nil)
	default:
		return invalidSchema(pointer, at, fmt.Sprintf("$schema %q: tool schemas must be JSON Schema draft 2020-12 (other dialects only with transport \"mcp\")", s), nil, nil)
	}
}

// dialectOf names the JSON Schema dialect of a $schema URL ("" when unknown).
func dialectOf(s string) string {
	s = strings.TrimSuffix(s, "#")
	s, ok := strings.CutPrefix(s, "https://")
	if !ok {
		s, _ = strings.CutPrefix(s, "http://")
	}
	switch s {
	case "json-schema.org/draft/2020-12/schema":
		return "2020-12"
	case "json-schema.org/draft/2019-09/schema":
		return "2019-09"
	case "json-schema.org/draft-07/schema":
		return "draft-07"
	case "json-schema.org/draft-06/schema":
		return "draft-06"
	case "json-schema.org/draft-04/schema":
		return "draft-04"
	}
	return ""
}

// noLoader refuses every URL: a schema's remote $ref or $schema is never
// fetched (http, https, file or otherwise). The JSON Schema metaschemas are
// built into the library and need no loader.
type noLoader struct{}

var errNoFetch = errors.New("remote references are not fetched")

func (noLoader) Load(string) (any, error) { return nil, errNoFetch }

func invalidSchema(base, at, msg string, issues []toolerr.Issue, cause error) *toolerr.Error {
	what := "schema"
	if base != "" {
		what = "schema " + base
	}
	return &toolerr.Error{
		Code:    toolerr.InvalidToolDefinition,
		Message: fmt.Sprintf("%s is invalid at %s: %s", what, displayPointer(at), msg),
		Issues:  issues,
		Details: map[string]any{"pointer": at},
		Err:     cause,
	}
}

// compileError maps a jsonschema compile error to invalid-tool-definition
// with the JSON Pointer of the problem inside the manifest.
func compileError(pointer string, doc any, err error) *toolerr.Error {
	var (
		sve   *jsonschema.SchemaValidationError
		rxe   *jsonschema.InvalidRegexError
		lue   *jsonschema.LoadURLError
		npe   *jsonschema.JSONPointerNotFoundError
		ane   *jsonschema.AnchorNotFoundError
		ipe   *jsonschema.InvalidJsonPointerError
		die   *jsonschema.DuplicateIDError
		dae   *jsonschema.DuplicateAnchorError
		pie   *jsonschema.ParseIDError
		pae   *jsonschema.ParseAnchorError
		prefx = fragmentTokens(pointer)
	)
	switch {
	case errors.As(err, &sve):
		var verr *jsonschema.ValidationError
		base := ptrOf(sve.URL)
		if errors.As(sve.Err, &verr) {
			conv := &issueConverter{
				docURL:   "-", // the metaschema is never the tool's document
				instance: lookup(doc, fragmentTokens(base)),
				prefix:   append(slices.Clip(prefx), fragmentTokens(base)...),
			}
			issues := conv.convert(verr)
			if len(issues) > 0 {
				first := issues[0]
				return invalidSchema(pointer, first.InstancePath, first.Message, issues, err)
			}
		}
		return invalidSchema(pointer, pointer+base, sve.Err.Error(), nil, err)
	case errors.As(err, &rxe):
		at := pointer + ptrOf(rxe.URL)
		if strings.HasSuffix(rxe.URL, "/patternProperties") {
			at += "/" + escapePointerToken(rxe.Regex)
		}
		return invalidSchema(pointer, at, fmt.Sprintf("invalid regular expression %q: %v", rxe.Regex, rxe.Err), nil, err)
	case errors.As(err, &lue):
		at := pointer + findRef(doc, lue.URL)
		return invalidSchema(pointer, at, fmt.Sprintf("reference %q cannot be resolved: remote references are not fetched", lue.URL), nil, err)
	case errors.As(err, &npe):
		return invalidSchema(pointer, pointer+findRef(doc, npe.URL), fmt.Sprintf("reference %q does not resolve", refText(npe.URL)), nil, err)
	case errors.As(err, &ane):
		return invalidSchema(pointer, pointer+findRef(doc, ane.Reference), fmt.Sprintf("reference %q does not resolve: anchor not found", refText(ane.Reference)), nil, err)
	case errors.As(err, &ipe):
		return invalidSchema(pointer, pointer+findRef(doc, ipe.URL), fmt.Sprintf("reference %q is not a valid JSON Pointer", refText(ipe.URL)), nil, err)
	case errors.As(err, &die):
		return invalidSchema(pointer, pointer+die.Ptr1, fmt.Sprintf("duplicate $id %q (also at %s)", die.ID, pointer+die.Ptr2), nil, err)
	case errors.As(err, &dae):
		return invalidSchema(pointer, pointer+dae.Ptr1, fmt.Sprintf("duplicate anchor %q (also at %s)", dae.Anchor, pointer+dae.Ptr2), nil, err)
	case errors.As(err, &pie):
		return invalidSchema(pointer, pointer+ptrOf(pie.URL), "invalid $id", nil, err)
	case errors.As(err, &pae):
		return invalidSchema(pointer, pointer+ptrOf(pae.URL), "invalid anchor", nil, err)
	}
	return invalidSchema(pointer, pointer, err.Error(), nil, err)
}

// ptrOf returns the JSON Pointer fragment of a location in the tool's
// schema document ("" for any other URL).
func ptrOf(loc string) string {
	base, frag := splitURL(loc)
	if base != docURL {
		return ""
	}
	return frag
}

// refText shows a reference relative to the schema document.
func refText(u string) string {
	if s, ok := strings.CutPrefix(u, docURL); ok {
		return s
	}
	return u
}

// findRef returns the JSON Pointer of the first $ref-like keyword in doc
// that resolves to target ("" when none does). It follows $id so that
// relative references resolve as the compiler resolved them. Matching
// ignores the fragment when no exact match exists.
func findRef(doc any, target string) string {
	tBase, tFrag := splitURL(target)
	var exact, loose string
	var foundExact, foundLoose bool
	var walk func(v any, base *url.URL, path []string)
	walk = func(v any, base *url.URL, path []string) {
		if foundExact {
			return
		}
		switch x := v.(type) {
		case map[string]any:
			if id, ok := x["$id"].(string); ok {
				if u, err := url.Parse(id); err == nil {
					base = base.ResolveReference(u)
				}
			}
			for _, k := range slices.Sorted(maps.Keys(x)) {
				switch k {
				case "$ref", "$dynamicRef", "$recursiveRef", "$schema":
					s, ok := x[k].(string)
					if !ok {
						continue
					}
					u, err := url.Parse(s)
					if err != nil {
						continue
					}
					r := base.ResolveReference(u)
					frag := r.Fragment
					r.Fragment, r.RawFragment = "", ""
					if r.String() != tBase {
						continue
					}
					p := pointer(append(slices.Clip(path), k))
					if frag == tFrag || (frag == "" && tFrag == "") {
						exact, foundExact = p, true
						return
					}
					if !foundLoose {
						loose, foundLoose = p, true
					}
				case "const", "enum", "default", "examples":
					// data, not schemas
				default:
					walk(x[k], base, append(slices.Clip(path), k))
				}
			}
		case []any:
			for i, e := range x {
				walk(e, base, append(slices.Clip(path), fmt.Sprint(i)))
			}
		}
	}
	base, _ := url.Parse(docURL)
	walk(doc, base, nil)
	if foundExact {
		return exact
	}
	return loose
}
