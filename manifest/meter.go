package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Validation is host work done for a call, so it is metered like the
// guest's (G01): the load-time guard (guard.go) bounds what checking one
// value costs, but a document holds many values, and a recursive schema
// multiplies per level of nesting, so nothing short of counting bounds a
// document. Every validation counts its work as it goes, in units:
//
//   - one per schema applied to a value (each schema object of the
//     compiled graph carries a meterExt extension (the meter vocabulary), which the library
//     runs once per evaluation that gets past its own assertions), plus
//     one per member of an object or array it is applied to (the loops
//     over members, and the assertions that fail early inside them, are
//     charged to the container's evaluation);
//   - one per bytesPerUnit bytes of a string a regular expression is
//     matched against (charged before matching: pattern, patternProperties,
//     propertyNames' patterns), or that a schema with format, minLength or
//     maxLength (or whose same-value subschemas have them) is applied to,
//     or that are members of a container whose member schemas have them;
//   - the weight of a costly number literal (numberWeight) per evaluation
//     on it, when the document holds one; an array's whole tree under
//     uniqueItems;
//   - one per schema the default filler applies, plus the members it walks.
//
// Not interrupted inside: one regular expression, format check,
// uniqueItems or enum comparison on one value (each charged). Assertions
// that fail before the library reaches their extension (type, const,
// enum, format) are charged to the schema that applied them, when it
// ends; a document whose value count times the heaviest enum/const passes
// the budget is refused before any work (ValidateLimited).
//
// About every checkEvery units (a fraction of a millisecond of work) the
// meter compares the count with its limit and calls the caller's Check
// (the call's deadline, cancellation and CPU budget); either ends the
// validation at once by unwinding it (a panic recovered in ValidateLimited),
// so no goroutine goes on validating for a call that has been answered.

// Work bounds the host work of one validation.
type Work struct {
	// Limit is the most work units the validation may spend (see
	// WorkLimit); past it the document is refused with a *WorkError.
	// Limit <= 0 means DefaultWorkLimit.
	Limit int64
	// Check, when non-nil, is called before any work and then about every
	// checkEvery units; an error from it stops the validation, which
	// returns that error as is. Decoding the document, before the
	// validation's work is counted, calls it too: after about every 64 KiB
	// of a document larger than that (decodeOpts.check).
	Check func() error
}

// Work units per millisecond of limits.cpuMs and the floor of a
// validation's budget (WorkLimit). One unit is about 0.1-0.5 us of CPU, so
// a budget is at most about the tool's cpuMs of CPU time.
const (
	WorkPerCPUMs  = 4000
	MinWorkLimit  = 1 << 20
	checkEvery    = 1 << 8
	maxWorkLimit  = 1 << 40
	defaultCPUMs  = 10000
	workLimitHelp = "raise limits.cpuMs, send a smaller document or simplify the schema"
)

// DefaultWorkLimit is the work budget of Validate, ValidateWithin,
// Tool.ValidateInput and Tool.ValidateOutput: WorkLimit of the default
// cpuMs (10000).
const DefaultWorkLimit = defaultCPUMs * WorkPerCPUMs

// WorkLimit is the work budget of validating one document of a tool whose
// limits.cpuMs is cpuMs: WorkPerCPUMs units per millisecond, at least
// MinWorkLimit (a 10,000-item array against an ordinary item schema takes
// tens of thousands).
func WorkLimit(cpuMs int64) int64 {
	if cpuMs <= 0 {
		cpuMs = defaultCPUMs
	}
	if cpuMs > maxWorkLimit/WorkPerCPUMs {
		return maxWorkLimit
	}
	return max(MinWorkLimit, cpuMs*WorkPerCPUMs)
}

// ErrWorkBudget is matched (errors.Is) by a *WorkError.
var ErrWorkBudget = errors.New("validation work budget exceeded")

// WorkError is the error of a validation stopped at its work limit.
type WorkError struct {
	Limit int64 // the budget, in work units
}

func (e *WorkError) Error() string {
	return fmt.Sprintf("validating it takes more than %d units of work, the validation budget", e.Limit)
}

// Is matches ErrWorkBudget.
func (e *WorkError) Is(target error) bool { return target == ErrWorkBudget }

// meter counts one validation's work. It is used by one goroutine.
type meter struct {
	used, next, limit int64
	check             func() error
	heavyNum          int64 // the document's largest numberWeight (0: no costly number)
}

// numberWeight is what reading number literal n costs the library beyond
// one unit, in work units: it parses numbers into big.Rat for type integer,
// bounds, multipleOf and comparisons, which costs in proportion to the
// literal's length and the magnitude of its exponent (about 0.5 ms for
// 1000 digits and an exponent of 9999, measured). 0 for ordinary numbers
// (up to 3 characters), 1 for a 4-7 character one.
func numberWeight(n json.Number) int64 {
	s := string(n)
	w := len(s)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, _ := strconv.Atoi(strings.TrimLeft(s[i+1:], "+-"))
		w += e
	}
	return int64(w / 4)
}

// numberCharge is the extra charge of an evaluation of weights w on v when
// the document holds costly numbers: the number's weight per same-value
// evaluation, or for a container the heaviest number per member.
func (m *meter) numberCharge(v any, w weights) int64 {
	switch x := v.(type) {
	case json.Number:
		return w.self * numberWeight(x)
	case map[string]any:
		return int64(len(x)) * w.member * m.heavyNum
	case []any:
		return int64(len(x)) * w.member * m.heavyNum
	}
	return 0
}

func newMeter(w Work) *meter {
	if w.Limit <= 0 {
		w.Limit = DefaultWorkLimit
	}
	return &meter{limit: w.Limit, check: w.Check}
}

// stopped is the panic value that unwinds a stopped validation.
type stopped struct{ err error }

// add charges n units and checks the budget when a check is due.
func (m *meter) add(n int64) {
	m.used += n
	if m.used >= m.next {
		m.slow()
	}
}

func (m *meter) slow() {
	if m.used > m.limit {
		panic(stopped{&WorkError{Limit: m.limit}})
	}
	if m.check != nil {
		if err := m.check(); err != nil {
			panic(stopped{err})
		}
	}
	m.next = m.used + checkEvery
}

// bytesPerUnit is how many bytes of a string checked by a regular
// expression or a format make one work unit (Go's regexp takes up to
// about 0.1 us per byte, measured with [xy]z).
const bytesPerUnit = 4

// weights are what an evaluation of one schema object costs (charge).
type weights struct {
	self   int64 // its own assertions (ownWeight) and same-value fan-out
	member int64 // per member of an object or array (memberWeight)
	str    int64 // per bytesPerUnit of a string value: string assertions here and in same-value subschemas
	memStr bool  // member schemas have string assertions: members' string bytes count
	unique bool  // uniqueItems: an array's whole tree counts
}

// charge is what an evaluation of a schema of weights w applied to v
// costs: w.self, each member of a container (w.member: the heaviest
// own-assertion cost of a schema applied to members, so that members
// failing those before the library reaches their extension are charged
// too), and the bytes of strings string assertions read.
func charge(v any, w weights) int64 {
	switch x := v.(type) {
	case string:
		return w.self + w.str*int64(len(x)/bytesPerUnit)
	case map[string]any:
		n := w.self + int64(len(x))*w.member
		if w.memStr {
			for k, e := range x {
				n += int64(len(k) / bytesPerUnit)
				if s, ok := e.(string); ok {
					n += int64(len(s) / bytesPerUnit)
				}
			}
		}
		return n
	case []any:
		n := w.self + int64(len(x))*w.member
		if w.memStr {
			for _, e := range x {
				if s, ok := e.(string); ok {
					n += int64(len(s) / bytesPerUnit)
				}
			}
		}
		return n
	}
	return w.self
}

// stringAsserts reports whether obj asserts on a string's content.
func stringAsserts(obj map[string]any) bool {
	for _, kw := range []string{"format", "minLength", "maxLength", "pattern"} {
		if _, ok := obj[kw]; ok {
			return true
		}
	}
	return false
}

// weightsOf computes the weights of schema object obj.
func weightsOf(obj map[string]any) weights {
	w := weights{self: ownWeight(obj) + sameValueFanout(obj), member: memberWeight(obj), unique: obj["uniqueItems"] == true}
	if stringAsserts(obj) {
		w.str++
	}
	for _, sub := range sameValueSubschemas(obj) {
		if stringAsserts(sub) {
			w.str++
		}
	}
	for _, sub := range memberSubschemas(obj) {
		if stringAsserts(sub) {
			w.memStr = true
		}
	}
	return w
}

// sameValueSubschemas lists the schema objects obj applies to the value
// itself.
func sameValueSubschemas(obj map[string]any) []map[string]any {
	var out []map[string]any
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		if a, ok := obj[kw].([]any); ok {
			for _, x := range a {
				if o, ok := x.(map[string]any); ok {
					out = append(out, o)
				}
			}
		}
	}
	for _, kw := range []string{"not", "if", "then", "else"} {
		if o, ok := obj[kw].(map[string]any); ok {
			out = append(out, o)
		}
	}
	return out
}

// memberSubschemas lists the schema objects obj applies to members of an
// object or array (and propertyNames, to its keys).
func memberSubschemas(obj map[string]any) []map[string]any {
	var out []map[string]any
	one := func(v any) {
		if o, ok := v.(map[string]any); ok {
			out = append(out, o)
		}
	}
	for _, kw := range []string{"items", "additionalProperties", "contains", "unevaluatedItems", "unevaluatedProperties", "additionalItems", "propertyNames"} {
		one(obj[kw])
	}
	for _, kw := range []string{"prefixItems", "items"} {
		if a, ok := obj[kw].([]any); ok {
			for _, x := range a {
				one(x)
			}
		}
	}
	for _, kw := range []string{"properties", "patternProperties"} {
		if m, ok := obj[kw].(map[string]any); ok {
			for _, x := range m {
				one(x)
			}
		}
	}
	return out
}

// ownWeight is what a schema object's own assertions cost per value, in
// work units: one, plus the enumWeight of its enum values and const.
func ownWeight(obj map[string]any) int64 {
	w := int64(1)
	if e, ok := obj["enum"].([]any); ok {
		for _, v := range e {
			w += enumWeight(v)
		}
	}
	if v, ok := obj["const"]; ok {
		w += enumWeight(v)
	}
	return w
}

// enumWeight is what comparing a value with v costs, in work units: one
// per JSON value in v, four per number (the library compares numbers as
// big.Rat: about 1.2 us each, measured).
func enumWeight(v any) int64 {
	switch x := v.(type) {
	case map[string]any:
		n := int64(1)
		for _, e := range x {
			n += enumWeight(e)
		}
		return n
	case []any:
		n := int64(1)
		for _, e := range x {
			n += enumWeight(e)
		}
		return n
	case json.Number, float64, int, int64:
		return 4
	}
	return 1
}

// sameValueFanout counts the subschemas obj applies to the value itself:
// each is charged to obj too, for those that fail (in a boolean context)
// before the library reaches their own extension.
func sameValueFanout(obj map[string]any) int64 {
	n := int64(0)
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		if a, ok := obj[kw].([]any); ok {
			n += int64(len(a))
		}
	}
	for _, kw := range []string{"$ref", "$dynamicRef", "$recursiveRef", "not", "if", "then", "else"} {
		if _, ok := obj[kw]; ok {
			n++
		}
	}
	for _, kw := range []string{"dependentSchemas", "dependencies"} {
		if m, ok := obj[kw].(map[string]any); ok {
			n += int64(len(m))
		}
	}
	return n
}

// memberWeight is the heaviest ownWeight of a schema obj applies to the
// members of an object or array, plus one.
func memberWeight(obj map[string]any) int64 {
	w := int64(1)
	for _, sub := range memberSubschemas(obj) {
		w = max(w, 1+ownWeight(sub))
	}
	return w
}

// recoverStop turns the unwinding of a stopped validation into its error;
// any other panic goes on.
func recoverStop(err *error) {
	if r := recover(); r != nil {
		s, ok := r.(stopped)
		if !ok {
			panic(r)
		}
		*err = s.err
	}
}

// meterURL names the meter's vocabulary. It has no keywords: its Compile
// attaches an extension to every schema object.
const meterURL = "sandboxd:///vocab/meter"

// meterSlot is where the extensions of one compiled copy of a schema find
// the meter of the validation using that copy (nil: none, count nothing).
// A copy is used by one validation at a time (copyPool), which sets m
// before validating and clears it after, on the same goroutine.
type meterSlot struct{ m *meter }

// meterExt counts an evaluation of one schema object.
type meterExt struct {
	slot *meterSlot
	w    weights
}

func (e meterExt) Validate(_ *jsonschema.ValidatorContext, v any) {
	if m := e.slot.m; m != nil {
		n := charge(v, e.w)
		if m.heavyNum > 0 {
			n += m.numberCharge(v, e.w)
		}
		if a, ok := v.([]any); ok && e.w.unique {
			n += treeSize(a) // uniqueItems hashes or compares every value
		}
		m.add(n)
	}
}

// treeSize counts the JSON values in v.
func treeSize(v any) int64 {
	n := int64(1)
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			n += treeSize(e)
		}
	case []any:
		for _, e := range x {
			n += treeSize(e)
		}
	}
	return n
}

func meterVocabulary(slot *meterSlot) *jsonschema.Vocabulary {
	return &jsonschema.Vocabulary{
		URL: meterURL,
		Compile: func(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
			return meterExt{slot: slot, w: weightsOf(obj)}, nil
		},
	}
}

// meteredRegexpEngine compiles regular expressions with Go's regexp (the
// library's default) into ones that charge slot's meter for the string
// before matching it.
func meteredRegexpEngine(slot *meterSlot) jsonschema.RegexpEngine {
	return func(expr string) (jsonschema.Regexp, error) {
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, err
		}
		return meteredRegexp{re, slot}, nil
	}
}

type meteredRegexp struct {
	*regexp.Regexp
	slot *meterSlot
}

func (r meteredRegexp) MatchString(s string) bool {
	if m := r.slot.m; m != nil {
		m.add(1 + int64(len(s)/bytesPerUnit))
	}
	return r.Regexp.MatchString(s)
}

// meteredCopy is one compilation of a schema document whose extensions
// report to slot.
type meteredCopy struct {
	sch  *jsonschema.Schema
	slot *meterSlot
}

// copyPool holds the compiled copies of one schema not in use. The
// library's compiled graph gives an extension no way to tell concurrent
// validations apart, so each validation takes a copy of its own: the pool
// grows to the schema's peak number of concurrent validations (each copy
// costs what compiling the document once did, which the load-time guard
// bounds) and never shrinks.
type copyPool struct {
	mu    sync.Mutex
	free  []*meteredCopy
	build func() (*meteredCopy, error)
}

func (p *copyPool) get() (*meteredCopy, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	return p.build()
}

func (p *copyPool) put(c *meteredCopy) {
	c.slot.m = nil
	p.mu.Lock()
	p.free = append(p.free, c)
	p.mu.Unlock()
}

// validateTree validates an already decoded document with the default work
// budget.
func (s *Schema) validateTree(v any) (issues []toolerr.Issue, err error) {
	defer recoverStop(&err)
	return s.validate(v, newMeter(Work{})), nil
}

// leafWeight is the heaviest own-assertion cost (ownWeight) of any schema
// in root's graph.
func leafWeight(root *jsonschema.Schema) int64 {
	w := int64(1)
	for _, s := range allSchemas(root) {
		n := int64(1)
		if s.Enum != nil {
			for _, v := range s.Enum.Values {
				n += enumWeight(v)
			}
		}
		if s.Const != nil {
			n += enumWeight(*s.Const)
		}
		w = max(w, n)
	}
	return w
}
