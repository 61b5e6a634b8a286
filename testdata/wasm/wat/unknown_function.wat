;; unknown_function: imports a sandboxd_v1 function ABI v1 does not define.
;; Refused at load.
(module
  (import "sandboxd_v1" "no_such_fn" (func $no_such_fn (param i32 i32) (result i32)))

  (memory (export "memory") 1)

  (func $handle (export "handle") (result i32)
    (drop (call $no_such_fn (i32.const 0) (i32.const 0)))
    (i32.const 0))
)
