;; secret: a reactor importing sandboxd_v1.secret_get — fine for most
;; postures, a defect under strict, where secrets are never readable.
(module
  (import "sandboxd_v1" "secret_get" (func $secret_get (param i32 i32 i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{}")
  (func $handle (export "handle") (result i32)
    (drop (call $output_set (i32.const 0) (i32.const 2)))
    (i32.const 0))
)
