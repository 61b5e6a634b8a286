;; forbidden_import: an otherwise valid reactor that imports from a module
;; other than sandboxd_v1 and wasi_snapshot_preview1 ("env" "foo"). Refused
;; at load; foo is never called.
(module
  (import "env" "foo" (func $foo))

  (memory (export "memory") 1)

  (func $handle (export "handle") (result i32)
    (i32.const 0))
)
