package pack

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Pack is a pack read but not loaded: its identity, its tools and its
// guardrail checks. Tools and Checks are sorted by id.
type Pack struct {
	// ID, Version and ArtifactVersion identify the pack (for /v1/info).
	// A directory of manifests has none; its reader leaves them "".
	ID, Version, ArtifactVersion string
	// PublishedAt is the index's publishedAt ("" for a directory).
	PublishedAt string
	// Env is the index's env declaration (nil when it declares none).
	Env *Env
	// Tools are the pack's tools.
	Tools []Tool
	// Checks are the guardrail checks that are pack code.
	Checks []Check
	// Builtin lists the guardrails of a pack.json whose check is not pack
	// code (no codeArtifactRef: a runtime built-in such as must-cite).
	// They are listed, never loaded.
	Builtin []string
	// Layout says which reader produced the pack.
	Layout Layout
	// Deploy is sandboxd's own pack.json "deploy": true (LayoutManifests
	// only; a Kindgi pack.json has no such field: deploy-ness is the
	// caller's flag).
	Deploy bool
}

// Layout names a pack's on-disk form.
type Layout string

const (
	// LayoutIndex is a Kindgi pack index with a module root.
	LayoutIndex Layout = "index"
	// LayoutKindgiPack is a directory whose pack.json follows Kindgi's
	// pack.schema.json (it has "manifestVersion").
	LayoutKindgiPack Layout = "kindgi-pack.json"
	// LayoutManifests is a directory of tool manifests (tool.json,
	// *.tool.json, */tool.json), optionally with sandboxd's own pack.json
	// ({"deploy": bool}).
	LayoutManifests Layout = "manifests"
)

// Env is a pack index's process environment declaration.
type Env struct {
	Required []string `json:"required"`
	Optional []string `json:"optional"`
}

// Tool is one tool ready for executor.Load: Manifest is a Kindgi tool
// manifest; Module, when non-nil, is its Wasm module (load it with
// executor.WithModule), else the manifest's codeArtifactRef is resolved
// with BaseDir as the base of relative filesystem and oci-layout paths
// (executor.WithBaseDir).
type Tool struct {
	ID string
	// Version is the version a caller may pin ("" when the pack gives none).
	Version string
	// Source says where the tool was declared, for problems and reports: a
	// file path, or "index.json#/tools/3".
	Source   string
	Manifest []byte
	Module   []byte
	// ModuleFile is the file under the module root Module was read from
	// (after the bundle map and the .wasm-beside rule).
	ModuleFile string
	BaseDir    string
}

// Problem is one reason a pack entry (or the pack itself) could not be read.
type Problem struct {
	// ID is the tool id or check id concerned, "" for the pack itself.
	ID string `json:"id,omitempty"`
	// Path is the file or index entry concerned, when there is one.
	Path string `json:"path,omitempty"`
	// Code is the native code of the problem: artifact-unavailable for a
	// module that cannot be read, invalid-tool-definition otherwise.
	Code    toolerr.Code `json:"code,omitempty"`
	Message string       `json:"message"`
}

// problemOf makes err, about the entry id at path, a Problem.
func problemOf(id, path string, err error) Problem {
	code := toolerr.InvalidToolDefinition
	var te *toolerr.Error
	if errors.As(err, &te) {
		code = te.Code
		return Problem{ID: id, Path: path, Code: code, Message: te.Message}
	}
	return Problem{ID: id, Path: path, Code: code, Message: err.Error()}
}

func (p Problem) String() string {
	var b strings.Builder
	if p.ID != "" {
		b.WriteString(p.ID + ": ")
	}
	b.WriteString(p.Message)
	if p.Path != "" {
		fmt.Fprintf(&b, " (%s)", p.Path)
	}
	return b.String()
}

// maxModuleBytes caps a module read from a module root.
const maxModuleBytes = 256 << 20

// MaxFileBytes caps a pack index, pack.json, bundle map or manifest file.
const MaxFileBytes = 16 << 20

// marshal encodes v for a synthesized manifest; the inputs are decoded
// JSON, so it cannot fail.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("pack: " + err.Error())
	}
	return b
}
