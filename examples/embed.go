package examples

import _ "embed"

// The echo example (tool acme.echo): its manifest, a sample input and its
// module, built as a reactor from echo/main.go by make wasm. The manifest's
// codeArtifactRef names handler.wasm relative to the manifest's directory.
// Callers must not modify these slices.
var (
	//go:embed echo/tool.json
	EchoManifest []byte
	//go:embed echo/input.json
	EchoInput []byte
	//go:embed echo/handler.wasm
	EchoWasm []byte
)
