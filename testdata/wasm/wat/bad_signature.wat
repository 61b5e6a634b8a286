;; bad_signature: imports sandboxd_v1 input_read as (i32) -> i32 instead of
;; (i32, i32) -> i32. Refused at load.
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32) (result i32)))

  (memory (export "memory") 1)

  (func $handle (export "handle") (result i32)
    (drop (call $input_read (i32.const 0)))
    (i32.const 0))
)
