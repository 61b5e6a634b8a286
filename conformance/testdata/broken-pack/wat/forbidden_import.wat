;; forbidden_import: a reactor importing from "env", which ABI v1 refuses.
(module
  (import "env" "foo" (func $foo))
  (memory (export "memory") 1)
  (func $handle (export "handle") (result i32)
    (i32.const 0))
)
