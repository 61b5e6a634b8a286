;; declared_error: a reactor that declares a structured failure with
;; error_set and returns 1.
(module
  (import "sandboxd_v1" "error_set" (func $error_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  ;; 64 bytes
  (data (i32.const 0) "{\"code\":\"not-found\",\"message\":\"no such item\",\"details\":{\"id\":7}}")

  (func $handle (export "handle") (result i32)
    (drop (call $error_set (i32.const 0) (i32.const 64)))
    (i32.const 1))
)
