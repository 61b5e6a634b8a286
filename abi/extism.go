package abi

// The Extism plug-in ABI: sandboxd runs unmodified Extism plug-ins as a
// second guest ABI (see docs/extism.md). A module importing from
// ExtismModuleName is an Extism plug-in; ExtismFunctions lists every import
// of that module Extism's runtime defines, with its Wasm signature.
// Handles (offsets into the host-side kernel memory) are i64.

// ExtismModuleName is the import module of Extism's kernel and host functions.
const ExtismModuleName = "extism:host/env"

// ExtismUserModuleName is Extism's default namespace for a host's own
// functions; sandboxd offers none.
const ExtismUserModuleName = "extism:host/user"

// ExtismFunctions maps every function of ExtismModuleName to its signature.
var ExtismFunctions = map[string]Signature{
	// kernel: memory, input, output, error
	"alloc":          sig(retI64, I64),
	"free":           sig(nil, I64),
	"length":         sig(retI64, I64),
	"length_unsafe":  sig(retI64, I64),
	"load_u8":        sig(retI32, I64),
	"load_u64":       sig(retI64, I64),
	"store_u8":       sig(nil, I64, I32),
	"store_u64":      sig(nil, I64, I64),
	"input_offset":   sig(retI64),
	"input_length":   sig(retI64),
	"input_load_u8":  sig(retI32, I64),
	"input_load_u64": sig(retI64, I64),
	"output_set":     sig(nil, I64, I64),
	"error_set":      sig(nil, I64),
	"error_get":      sig(retI64),
	"output_offset":  sig(retI64),
	"output_length":  sig(retI64),
	"input_set":      sig(nil, I64, I64),
	"reset":          sig(nil),
	"memory_bytes":   sig(retI64),
	// host: config, vars, HTTP, logging
	"config_get":       sig(retI64, I64),
	"var_get":          sig(retI64, I64),
	"var_set":          sig(nil, I64, I64),
	"http_request":     sig(retI64, I64, I64),
	"http_status_code": sig(retI32),
	"http_headers":     sig(retI64),
	"log_trace":        sig(nil, I64),
	"log_debug":        sig(nil, I64),
	"log_info":         sig(nil, I64),
	"log_warn":         sig(nil, I64),
	"log_error":        sig(nil, I64),
	"get_log_level":    sig(retI32),
}
