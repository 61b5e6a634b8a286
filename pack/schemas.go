package pack

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The Kindgi schemas, copied verbatim from spec/ (TestEmbeddedSchemas
// compares them).
//
//go:embed schema/*.json
var schemaFS embed.FS

const (
	packSchemaURL      = "https://kindgi.com/schemas/v1/pack.schema.json"
	indexSchemaURL     = "https://kindgi.com/schemas/v1/pack-index.schema.json"
	toolSchemaURL      = "https://kindgi.com/schemas/v1/tool.schema.json"
	guardrailSchemaURL = "https://kindgi.com/schemas/v1/guardrail.schema.json"
)

// standIns are the schemas pack.schema.json refers to that are not
// vendored: capability declarations are checked only to be objects, and an
// agent's tool references have the pack index's {id, version} shape.
var standIns = map[string]string{
	"https://kindgi.com/schemas/v1/capability.schema.json": `{"type":"object"}`,
	"https://kindgi.com/schemas/v1/agent.schema.json": `{"$defs":{"ToolRef":{"type":"object","required":["id","version"],"additionalProperties":false,` +
		`"properties":{"id":{"type":"string","minLength":1},"version":{"type":"string"}}}}}`,
}

// regexpEngine is Go's regexp plus the one ECMAScript construct the
// Kindgi schemas use that RE2 lacks: a leading negative lookahead of a
// literal, "^(?!KINDGI_)…" (pack-index $defs/envName), run as a prefix
// test before the rest of the pattern.
func regexpEngine(s string) (jsonschema.Regexp, error) {
	if rest, ok := strings.CutPrefix(s, "^(?!"); ok {
		if lit, tail, ok := strings.Cut(rest, ")"); ok && regexp.QuoteMeta(lit) == lit {
			re, err := regexp.Compile("^" + tail)
			if err != nil {
				return nil, err
			}
			return notPrefixed{re: re, prefix: lit, src: s}, nil
		}
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, err
	}
	return (*goRegexp)(re), nil
}

type goRegexp regexp.Regexp

func (re *goRegexp) MatchString(s string) bool { return (*regexp.Regexp)(re).MatchString(s) }
func (re *goRegexp) String() string            { return (*regexp.Regexp)(re).String() }

type notPrefixed struct {
	re          *regexp.Regexp
	prefix, src string
}

func (n notPrefixed) MatchString(s string) bool {
	return !strings.HasPrefix(s, n.prefix) && n.re.MatchString(s)
}
func (n notPrefixed) String() string { return n.src }

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: remote schemas are never fetched", url)
}

var kindgiSchemas = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	c.UseRegexpEngine(regexpEngine)
	files := map[string]string{
		packSchemaURL: "schema/pack.schema.json", indexSchemaURL: "schema/pack-index.schema.json",
		toolSchemaURL: "schema/tool.schema.json", guardrailSchemaURL: "schema/guardrail.schema.json",
	}
	add := func(url string, b []byte) error {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return err
		}
		return c.AddResource(url, doc)
	}
	for url, f := range files {
		b, err := schemaFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := add(url, b); err != nil {
			return nil, err
		}
	}
	for url, s := range standIns {
		if err := add(url, []byte(s)); err != nil {
			return nil, err
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, url := range []string{packSchemaURL, indexSchemaURL, guardrailSchemaURL} {
		s, err := c.Compile(url)
		if err != nil {
			return nil, err
		}
		out[url] = s
	}
	return out, nil
})

// validateAgainst validates data (one JSON document) against the embedded
// schema at url and returns one line per leaf error ("/tools/0: …"), at
// most 20, or nil when it is valid.
func validateAgainst(url string, data []byte) ([]string, error) {
	schemas, err := kindgiSchemas()
	if err != nil {
		return nil, fmt.Errorf("embedded schemas: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	err = schemas[url].Validate(doc)
	if err == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil, err
	}
	var lines []string
	var walk func(u *jsonschema.OutputUnit)
	seen := map[string]bool{}
	walk = func(u *jsonschema.OutputUnit) {
		if len(u.Errors) == 0 && u.Error != nil {
			at := u.InstanceLocation
			if at == "" {
				at = "/"
			}
			l := at + ": " + u.Error.String()
			if !seen[l] {
				seen[l] = true
				lines = append(lines, l)
			}
		}
		for i := range u.Errors {
			walk(&u.Errors[i])
		}
	}
	walk(ve.DetailedOutput())
	sort.Strings(lines)
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("(and %d more)", len(lines)-20))
	}
	if len(lines) == 0 {
		lines = []string{strings.TrimSpace(ve.Error())}
	}
	return lines, nil
}
