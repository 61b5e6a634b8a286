package examples

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestEcho(t *testing.T) {
	var m struct {
		ID              string `json:"id"`
		CodeArtifactRef struct {
			Kind       string `json:"kind"`
			ModulePath string `json:"modulePath"`
		} `json:"codeArtifactRef"`
	}
	if err := json.Unmarshal(EchoManifest, &m); err != nil {
		t.Fatalf("EchoManifest: %v", err)
	}
	if m.ID != "acme.echo" || m.CodeArtifactRef.Kind != "filesystem" || m.CodeArtifactRef.ModulePath != "handler.wasm" {
		t.Errorf("EchoManifest = %+v, want acme.echo with filesystem ref handler.wasm", m)
	}
	if !json.Valid(EchoInput) {
		t.Errorf("EchoInput is not JSON: %s", EchoInput)
	}
	if !bytes.HasPrefix(EchoWasm, []byte("\x00asm\x01\x00\x00\x00")) {
		t.Errorf("EchoWasm is not a Wasm module (starts %q)", EchoWasm[:min(8, len(EchoWasm))])
	}
}
