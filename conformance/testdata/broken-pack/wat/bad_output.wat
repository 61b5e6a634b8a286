;; bad_output: a reactor whose output {"wrong":1} breaks any output schema
;; requiring other properties.
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"wrong\":1}")
  (func $handle (export "handle") (result i32)
    (drop (call $output_set (i32.const 0) (i32.const 11)))
    (i32.const 0))
)
