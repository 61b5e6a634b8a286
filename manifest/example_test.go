package manifest_test

import (
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

func ExampleLoad() {
	tool, err := manifest.Load([]byte(`{
		"id": "acme.greet",
		"description": "Greets someone.",
		"version": "1.0.0",
		"input": {
			"type": "object",
			"required": ["name"],
			"properties": {
				"name": {"type": "string", "minLength": 1},
				"greeting": {"type": "string", "default": "Hello"}
			},
			"additionalProperties": false
		},
		"output": {"type": "string"}
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(tool.ID, tool.Posture())

	in, err := tool.ValidateInput([]byte(`{"name":"Ada"}`))
	fmt.Println(string(in), err)

	_, err = tool.ValidateInput([]byte(`{"nom":"Ada"}`))
	var te *toolerr.Error
	if errors.As(err, &te) {
		fmt.Println(te.Code)
		for _, is := range te.Issues {
			fmt.Printf("%q %s %v: %s\n", is.InstancePath, is.Keyword, is.Params, is.Message)
		}
	}
	// Output:
	// acme.greet context-isolated
	// {"greeting":"Hello","name":"Ada"} <nil>
	// input-validation-failed
	// "" required map[missingProperty:name]: must have required property 'name'
	// "" additionalProperties map[additionalProperty:nom]: must NOT have additional properties
}
