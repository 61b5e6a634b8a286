;; trap: a reactor whose handle calls $explode, which executes unreachable,
;; so the trap's stack trace has two frames: explode, then handle.
(module
  (memory (export "memory") 1)

  (func $explode
    unreachable)

  (func $handle (export "handle") (result i32)
    (call $explode)
    (i32.const 0))
)
