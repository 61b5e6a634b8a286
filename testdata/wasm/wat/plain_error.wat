;; plain_error: a reactor that declares a failure with a plain-text message
;; (not JSON) and returns 2.
(module
  (import "sandboxd_v1" "error_set" (func $error_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  ;; 15 bytes
  (data (i32.const 0) "something broke")

  (func $handle (export "handle") (result i32)
    (drop (call $error_set (i32.const 0) (i32.const 15)))
    (i32.const 2))
)
