// Package conformance owns `sandboxd conformance`: the static and
// behavioural checks that prove a pack's tools conform before they ship, and
// the reports (human summary, JUnit XML, JSON) a CI pipeline reads.
//
// A pack is a directory read by package pack's rule (a Kindgi pack.json's
// tools and guardrails, else tool.json, *.tool.json and */tool.json) with
// case files (*.cases.json, see docs/conformance.md), a Kindgi pack index
// (Options.Index, Options.ModuleRoot, Options.BundleMap), or an OCI
// artifact (oci://REF) checked against manifests and case files in a
// separate directory. Guardrail checks are checked as the tools they run
// as, with a "config" check after "schemas" and config probes. Run checks
// every tool in a fixed order:
//
//	manifest        the manifest is valid against the Kindgi tool schema
//	schemas         its input and output schemas compile
//	network         the egress policy parses; strict never pairs with unrestricted
//	limits          limits fit wasm32; strict tools declare them
//	artifact-ref    deploy packs never point at the filesystem; strict refs are digest-pinned
//	artifact        the codeArtifactRef resolves (digest and artifactVersion verified)
//	module          the module compiles (WebAssembly validation)
//	abi             entry point, imports and memory fit the ABI (ABI v1 or Extism, named) and the posture
//	case NAME       one behavioural case: input → expected output or error code
//	probe input-validation  an input breaking the input schema is refused
//	probe output-schema     every case output is valid against the output schema
//	probe determinism       mutating: false tools answer alike on two fresh instances
//	cassette        with Options.Cassettes: a recording of the tool replays identically offline
//
// A case file that does not parse, or names a tool the pack lacks, is a
// failed "cases" check under the file's name; a cassette likewise, a
// failed "cassette" check.
//
// A check whose prerequisite failed is skipped, so every defect is reported
// once. Findings are pass, fail, warn (determinism only) or skip; a Report
// fails when any check failed. Problems with the run itself — bad options,
// an unreadable pack, an unreachable registry — are an *InfraError from
// Run instead of a report, so CI can tell them apart (exit 2, not 1).
package conformance
