;; bad_handle_signature: exports handle as (i32) -> i32 instead of () -> i32.
;; Refused at load.
(module
  (memory (export "memory") 1)

  (func $handle (export "handle") (param i32) (result i32)
    (local.get 0))
)
