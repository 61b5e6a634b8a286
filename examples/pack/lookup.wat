;; lookup: a reactor that finds nothing: it declares the failure
;; {"code":"not-found","message":"no such item"} with error_set and
;; returns 1, which sandboxd reports as handler-error.
;; Build: wat2wasm lookup.wat -o lookup.wasm
(module
  (import "sandboxd_v1" "error_set" (func $error_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  ;; 45 bytes
  (data (i32.const 0) "{\"code\":\"not-found\",\"message\":\"no such item\"}")

  (func $handle (export "handle") (result i32)
    (drop (call $error_set (i32.const 0) (i32.const 45)))
    (i32.const 1))
)
