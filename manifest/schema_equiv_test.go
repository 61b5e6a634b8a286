package manifest

import (
	"os"
	"strings"
	"testing"
)

// specSchemaPath is the published Kindgi tool schema, vendored at the
// repository root (spec/README.md).
const specSchemaPath = "../spec/kindgi-tool.schema.json"

// equivCorpus holds manifests with the verdict the Kindgi tool schema gives.
// Each entry is spliced into a minimal valid manifest unless it starts with
// "!" (then it is the whole document).
var equivCorpus = []struct {
	name  string
	doc   string
	valid bool
}{
	// required and top-level shape
	{"minimal", ``, true},
	{"not an object", `![]`, false},
	{"string", `!"tool"`, false},
	{"missing id", `!{"description":"d","version":"1.0.0","input":{},"output":{}}`, false},
	{"missing description", `!{"id":"t","version":"1.0.0","input":{},"output":{}}`, false},
	{"missing version", `!{"id":"t","description":"d","input":{},"output":{}}`, false},
	{"missing input", `!{"id":"t","description":"d","version":"1.0.0","output":{}}`, false},
	{"missing output", `!{"id":"t","description":"d","version":"1.0.0","input":{}}`, false},
	{"extra property", `"handler":"x"`, false},
	{"empty id", `!{"id":"","description":"d","version":"1.0.0","input":{},"output":{}}`, false},
	{"empty description", `!{"id":"t","description":"","version":"1.0.0","input":{},"output":{}}`, false},
	{"id not a string", `!{"id":7,"description":"d","version":"1.0.0","input":{},"output":{}}`, false},
	// version
	{"version prerelease", `!{"id":"t","description":"d","version":"1.0.0-rc1","input":{},"output":{}}`, false},
	{"version two parts", `!{"id":"t","description":"d","version":"1.0","input":{},"output":{}}`, false},
	{"version v prefix", `!{"id":"t","description":"d","version":"v1.0.0","input":{},"output":{}}`, false},
	{"version big numbers", `!{"id":"t","description":"d","version":"10.200.3000","input":{},"output":{}}`, true},
	{"version trailing newline", `!{"id":"t","description":"d","version":"1.0.0\n","input":{},"output":{}}`, false},
	// input / output
	{"input not an object", `!{"id":"t","description":"d","version":"1.0.0","input":true,"output":{}}`, false},
	{"output array", `!{"id":"t","description":"d","version":"1.0.0","input":{},"output":[]}`, false},
	{"input any schema object", `!{"id":"t","description":"d","version":"1.0.0","input":{"type":"nonsense"},"output":{}}`, true},
	// needs / effects
	{"needs", `"needs":[{"name":"tenant"},{"name":"blob","optional":true}]`, true},
	{"needs missing name", `"needs":[{"optional":true}]`, false},
	{"needs empty name", `"needs":[{"name":""}]`, false},
	{"needs extra", `"needs":[{"name":"a","kind":"x"}]`, false},
	{"needs optional not bool", `"needs":[{"name":"a","optional":"yes"}]`, false},
	{"effects all kinds", `"effects":[{"kind":"reads"},{"kind":"writes"},{"kind":"deletes"},{"kind":"network"},{"kind":"spawns-run"},{"kind":"emits-event"},{"kind":"external-side-effect","resource":"r","notes":"n"},{"kind":"sensitive-data-egress"}]`, true},
	{"effects unknown kind", `"effects":[{"kind":"mines-bitcoin"}]`, false},
	{"effects extra", `"effects":[{"kind":"reads","why":"x"}]`, false},
	// transport, mcpEndpoint, metadata, sandbox, mutating
	{"transports", `"transport":"mcp","mcpEndpoint":"mcp+stdio://x"`, true},
	{"transport unknown", `"transport":"grpc"`, false},
	{"mcpEndpoint not string", `"mcpEndpoint":1`, false},
	{"metadata free-form", `"metadata":{"x.ai/tool":{"kind":"read"},"tags":["a"],"n":null}`, true},
	{"metadata array", `"metadata":[]`, false},
	{"sandbox postures", `"sandbox":"context-isolated"`, true},
	{"sandbox unknown", `"sandbox":"vm"`, false},
	{"mutating", `"mutating":true`, true},
	{"mutating string", `"mutating":"false"`, false},
	// limits
	{"limits", `"limits":{"memMB":128,"cpuMs":500}`, true},
	{"limits integer as float", `"limits":{"memMB":128.0,"cpuMs":5e2}`, true},
	{"limits fraction", `"limits":{"memMB":1.5,"cpuMs":1}`, false},
	{"limits zero", `"limits":{"memMB":0,"cpuMs":1}`, false},
	{"limits missing cpu", `"limits":{"memMB":1}`, false},
	{"limits extra", `"limits":{"memMB":1,"cpuMs":1,"wallMs":1}`, false},
	// network oneOf
	{"network none", `"network":{"kind":"none"}`, true},
	{"network unrestricted", `"network":{"kind":"unrestricted"}`, true},
	{"network allowlist", `"network":{"kind":"allowlist","hosts":["example.com","*.x.org:443"]}`, true},
	{"network allowlist empty", `"network":{"kind":"allowlist","hosts":[]}`, true},
	{"network allowlist no hosts", `"network":{"kind":"allowlist"}`, false},
	{"network none with hosts", `"network":{"kind":"none","hosts":["a"]}`, false},
	{"network empty host", `"network":{"kind":"allowlist","hosts":[""]}`, false},
	{"network unknown kind", `"network":{"kind":"some"}`, false},
	{"network not object", `"network":"none"`, false},
	// needsSpec
	{"needsSpec", `"needsSpec":{"env":{"A":{"type":"string"}},"secrets":{"T":{}},"config":{"c":{"type":"integer"}},"capabilities":["x"],"bindings":["db"]}`, true},
	{"needsSpec env value not object", `"needsSpec":{"env":{"A":"string"}}`, false},
	{"needsSpec empty capability", `"needsSpec":{"capabilities":[""]}`, false},
	{"needsSpec extra", `"needsSpec":{"files":{}}`, false},
	// codeArtifactRef oneOf
	{"artifact oci", `"codeArtifactRef":{"kind":"oci","imageRef":"r/i:1","modulePath":"m.wasm","artifactVersion":"1"}`, true},
	{"artifact filesystem", `"codeArtifactRef":{"kind":"filesystem","modulePath":"/abs/m.wasm"}`, true},
	{"artifact oci missing version", `"codeArtifactRef":{"kind":"oci","imageRef":"r","modulePath":"m"}`, false},
	{"artifact filesystem with imageRef", `"codeArtifactRef":{"kind":"filesystem","modulePath":"m","imageRef":"r"}`, false},
	{"artifact empty modulePath", `"codeArtifactRef":{"kind":"filesystem","modulePath":""}`, false},
	{"artifact unknown kind", `"codeArtifactRef":{"kind":"http","modulePath":"m"}`, false},
	{"artifact not object", `"codeArtifactRef":"oci://x"`, false},
	// spec (HttpToolSpec) with its oneOfs
	{"spec minimal", `"spec":{"kind":"http","method":"GET","urlTemplate":"https://x/{q}"}`, true},
	{"spec full bearer json-input", `"spec":{"kind":"http","method":"POST","urlTemplate":"u","headers":[{"name":"A","value":""}],"authorization":{"kind":"bearer","secretRef":{"envName":"E","name":"n"}},"requestBody":{"kind":"json-input"},"timeoutMs":1000,"parseJson":false,"successStatus":{"min":200,"max":299}}`, true},
	{"spec header auth passthrough", `"spec":{"kind":"http","method":"PUT","urlTemplate":"u","authorization":{"kind":"header","headerName":"X-Key","secretRef":{"envName":"E","name":"n"}},"requestBody":{"kind":"input-passthrough"}}`, true},
	{"spec text body", `"spec":{"kind":"http","method":"PATCH","urlTemplate":"u","requestBody":{"kind":"text","template":"hi {x}"}}`, true},
	{"spec text body without template", `"spec":{"kind":"http","method":"DELETE","urlTemplate":"u","requestBody":{"kind":"text"}}`, false},
	{"spec json-input with template", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","requestBody":{"kind":"json-input","template":"x"}}`, false},
	{"spec header auth without headerName", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","authorization":{"kind":"header","secretRef":{"envName":"E","name":"n"}}}`, false},
	{"spec bearer with headerName", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","authorization":{"kind":"bearer","headerName":"h","secretRef":{"envName":"E","name":"n"}}}`, false},
	{"spec secretRef incomplete", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","authorization":{"kind":"bearer","secretRef":{"name":"n"}}}`, false},
	{"spec unknown method", `"spec":{"kind":"http","method":"HEAD","urlTemplate":"u"}`, false},
	{"spec other kind", `"spec":{"kind":"sql","method":"GET","urlTemplate":"u"}`, false},
	{"spec empty url", `"spec":{"kind":"http","method":"GET","urlTemplate":""}`, false},
	{"spec header missing value", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","headers":[{"name":"A"}]}`, false},
	{"spec timeout zero", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","timeoutMs":0}`, false},
	{"spec status out of range", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","successStatus":{"min":99,"max":600}}`, false},
	{"spec status missing max", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","successStatus":{"min":200}}`, false},
	{"spec extra", `"spec":{"kind":"http","method":"GET","urlTemplate":"u","retries":3}`, false},
	// everything at once
	{"everything", `"needs":[{"name":"n"}],"effects":[{"kind":"reads"}],"transport":"auto","mcpEndpoint":"mcp+sse://h","metadata":{},"sandbox":"strict","mutating":false,"limits":{"memMB":1,"cpuMs":1},"network":{"kind":"none"},"needsSpec":{},"codeArtifactRef":{"kind":"filesystem","modulePath":"m"},"spec":{"kind":"http","method":"GET","urlTemplate":"u"}`, true},
}

func corpusDoc(doc string) string {
	if d, ok := strings.CutPrefix(doc, "!"); ok {
		return d
	}
	return base(doc)
}

// TestEmbeddedSchemaMatchesSpec checks that the embedded tool schema and the
// published one accept and refuse the same manifests.
func TestEmbeddedSchemaMatchesSpec(t *testing.T) {
	raw, err := os.ReadFile(specSchemaPath)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeJSON(raw, decodeOpts{rejectDuplicates: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := compileSchema("", d.v, only2020)
	if err != nil {
		t.Fatal(err)
	}
	ours := toolSchema()
	if len(equivCorpus) < 40 {
		t.Fatalf("corpus has %d documents, want at least 40", len(equivCorpus))
	}
	for _, c := range equivCorpus {
		t.Run(c.name, func(t *testing.T) {
			doc, err := decodeJSON([]byte(corpusDoc(c.doc)), decodeOpts{})
			if err != nil {
				t.Fatalf("corpus document is not JSON: %v", err)
			}
			specIssues := spec.validate(doc.v, newMeter(Work{}))
			ourIssues := ours.validate(doc.v, newMeter(Work{}))
			if (len(specIssues) == 0) != (len(ourIssues) == 0) {
				t.Fatalf("spec valid=%v, embedded valid=%v (spec issues %v, embedded issues %v)",
					len(specIssues) == 0, len(ourIssues) == 0, specIssues, ourIssues)
			}
			if (len(specIssues) == 0) != c.valid {
				t.Errorf("valid = %v, corpus says %v: %v", len(specIssues) == 0, c.valid, specIssues)
			}
		})
	}
}

// TestCorpusThroughParse runs the same corpus through Parse.
func TestCorpusThroughParse(t *testing.T) {
	for _, c := range equivCorpus {
		_, err := Parse([]byte(corpusDoc(c.doc)))
		if (err == nil) != c.valid {
			t.Errorf("%s: Parse err = %v, want valid=%v", c.name, err, c.valid)
		}
	}
}
