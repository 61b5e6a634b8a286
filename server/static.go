package server

import (
	"github.com/sandboxd/sandboxd/executor"
)

// StaticTool is a manifest with its module bytes, for StaticSource.
type StaticTool struct {
	Manifest []byte
	Module   []byte
}

// StaticSource serves tools given in memory (an embedding program, the
// bundled example, tests). Versions callers may pin are the manifests'.
// PackID, PackVersion and ArtifactVersion default as for DirSource.
type StaticSource struct {
	Tools                                []StaticTool
	PackID, PackVersion, ArtifactVersion string
}

func (s StaticSource) load() (*packSpec, []Problem) {
	spec := &packSpec{packID: s.PackID, packVersion: s.PackVersion, artifactVersion: s.ArtifactVersion}
	if spec.packID == "" {
		spec.packID = "sandboxd"
	}
	if spec.packVersion == "" {
		spec.packVersion = "0.0.0"
	}
	for _, t := range s.Tools {
		id, version := manifestHead(t.Manifest)
		spec.tools = append(spec.tools, toolSpec{id: id, version: version, man: t.Manifest,
			opts: []executor.LoadOption{executor.WithModule(t.Module)}})
	}
	return spec, nil
}
