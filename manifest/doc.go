// Package manifest owns Kindgi tool manifests in sandboxd: it parses and
// validates them against the embedded tool schema (schema version 1.1.0),
// compiles their input and output JSON Schemas, fills input defaults and
// reports validation problems as Ajv-shaped toolerr.Issues.
//
// Parse checks a manifest; Load also compiles its schemas into a Tool, whose
// ValidateInput and ValidateOutput are safe for concurrent use. Every
// failure is a *toolerr.Error: invalid-tool-definition for the manifest and
// its schemas, input-validation-failed and output-validation-failed for
// values. Nothing here performs I/O: a remote $ref is refused, not fetched.
//
// Issues follow Ajv (https://ajv.js.org/api.html#error-objects) with
// allErrors: required is reported at the parent's instancePath, one issue per
// missing or additional property, and anyOf/oneOf add their own issue after
// those of their branches. Ajv's extra "if" issue after a failed then/else is
// not reported.
package manifest
