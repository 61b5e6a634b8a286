;; oob: a reactor whose handle loads an i32 one page past the end of its
;; one-page memory: an out-of-bounds memory access trap.
(module
  (memory (export "memory") 1)

  (func $handle (export "handle") (result i32)
    (drop (i32.load (i32.const 65536)))
    (i32.const 0))
)
