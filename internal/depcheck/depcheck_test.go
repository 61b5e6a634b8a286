// Package depcheck guards the dependency directions of docs/DESIGN.md "Layout":
// cmd → server/conformance → executor → artifact, limits, egress, abi,
// manifest; nothing imports cmd, the leaf packages never import the
// executor, and no internal package but the test kit's exectest imports
// executor, server or cmd; internal/suggest imports nothing of the module.
package depcheck

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/sandboxd/sandboxd"

func TestDependencyDirections(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", mod+"/...").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	forbidden := map[string][]string{
		// leaf packages must not reach up
		"abi":      {"executor", "manifest", "artifact", "limits", "cmd"},
		"toolerr":  {"executor", "manifest", "artifact", "limits", "abi", "cmd"},
		"artifact": {"executor", "cmd"},
		"manifest": {"executor", "artifact", "limits", "cmd"},
		"egress":   {"executor", "cmd"},
		"executor": {"cmd"},
		// the Extism kernel is a leaf beside limits (executor turns its
		// errors into traps)
		"internal/extism": {"executor", "manifest", "artifact", "egress", "internal/fuel", "cmd"},
		"guest-sdk/go":    {"executor", "manifest", "artifact", "limits", "cmd"},

		// the one Wasm reader: internal/fuel reads with it, never the reverse
		"internal/wasmbin": {"internal/fuel", "executor", "cmd"},

		// the test kit serves every package, so it imports none of them
		// but the leaf limits (thread CPU time for Timed); limits itself
		// imports nothing of the module, so package executor and manifest
		// tests can still use the kit
		"internal/sandboxtest": {"abi", "toolerr", "artifact", "manifest", "egress", "executor", "server", "cmd"},
		"limits":               {"executor", "manifest", "artifact", "cmd", "abi", "toolerr", "egress", "internal/sandboxtest"},
	}
	// Leaves that import no package of the module at all: the one "did you
	// mean" rule serves cmd, manifest, server and mcp alike; the uncleared
	// buffers serve executor, internal/httpspec and internal/extism.
	standalone := map[string]bool{"internal/suggest": true, "internal/rawbuf": true}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		for _, d := range p.Deps {
			if !strings.HasPrefix(d, mod+"/") {
				continue
			}
			drel := strings.TrimPrefix(d, mod+"/")
			if standalone[rel] {
				t.Errorf("%s depends on %s: it imports nothing of the module", rel, drel)
			}
			if strings.HasPrefix(drel, "cmd/") {
				t.Errorf("%s imports %s: nothing may import cmd", rel, drel)
			}
			// exectest is the one internal package above executor: it is
			// test support that builds executors for the test packages.
			if strings.HasPrefix(rel, "internal/") && rel != "internal/sandboxtest/exectest" {
				for _, bad := range []string{"executor", "server"} {
					if drel == bad || strings.HasPrefix(drel, bad+"/") {
						t.Errorf("%s depends on %s: internal packages sit below executor and server", rel, drel)
					}
				}
			}
			for _, bad := range forbidden[rel] {
				if drel == bad || strings.HasPrefix(drel, bad+"/") {
					t.Errorf("%s depends on %s", rel, drel)
				}
			}
		}
	}
	if seen < 5 {
		t.Fatalf("go list listed only %d packages", seen)
	}
}
