;; not_json_output: a reactor that passes "not json" to output_set. The host
;; refuses it (-3, invalid-argument); the handler ignores that and returns 0,
;; so no output was ever set (the output is null).
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  ;; 8 bytes
  (data (i32.const 0) "not json")

  (func $handle (export "handle") (result i32)
    (drop (call $output_set (i32.const 0) (i32.const 8)))
    (i32.const 0))
)
