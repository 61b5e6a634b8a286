;; bad_output: a reactor that succeeds with the output {"unexpected":true}:
;; valid JSON that an output schema with required properties or
;; additionalProperties: false rejects.
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  ;; 19 bytes
  (data (i32.const 0) "{\"unexpected\":true}")

  (func $handle (export "handle") (result i32)
    (drop (call $output_set (i32.const 0) (i32.const 19)))
    (i32.const 0))
)
