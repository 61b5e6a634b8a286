// Command extism-go is a sandboxd handler written with Extism's Go PDK
// (github.com/extism/go-pdk): an unmodified Extism plug-in, built as a WASI
// reactor with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o extism-go.wasm .
//
// It exports two functions; a manifest picks one with a #NAME suffix on its
// modulePath (count-vowels.tool.json: count_vowels; greet.tool.json: greet).
package main

import (
	"strings"

	"github.com/extism/go-pdk"
)

// countResult is count_vowels's output, the same document as Extism's own
// count_vowels plug-in returns.
type countResult struct {
	Count  int    `json:"count"`
	Total  int    `json:"total"`
	Vowels string `json:"vowels"`
}

const vowels = "aeiouAEIOU"

// countVowels counts the vowels of its input (the tool's input schema is a
// string, so the plug-in gets the string's bytes) and keeps a running total
// in an Extism var: under posture none it grows from call to call on a warm
// instance, under context-isolated and strict every call starts at zero.
//
//go:wasmexport count_vowels
func countVowels() int32 {
	n := 0
	for _, c := range pdk.InputString() {
		if strings.ContainsRune(vowels, c) {
			n++
		}
	}
	total := pdk.GetVarInt("total") + n
	pdk.SetVarInt("total", total)
	if err := pdk.OutputJSON(countResult{Count: n, Total: total, Vowels: vowels}); err != nil {
		pdk.SetError(err)
		return 1
	}
	return 0
}

// greet greets its input with the "greeting" config value (needsSpec.config)
// and fails, with Extism's error_set, on an empty name.
//
//go:wasmexport greet
func greet() int32 {
	name := pdk.InputString()
	if name == "" {
		pdk.SetErrorString("greet: the name is empty")
		return 1
	}
	greeting, ok := pdk.GetConfig("greeting")
	if !ok {
		greeting = "Hello"
	}
	pdk.Log(pdk.LogInfo, "greeting "+name)
	pdk.OutputString(greeting + ", " + name + "!")
	return 0
}

func main() {}
