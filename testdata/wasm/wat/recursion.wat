;; recursion: a reactor whose handle recurses without bound, so the call
;; stack overflows (a trap).
(module
  (memory (export "memory") 1)

  ;; $down returns 1 + $down(depth + 1): never a tail call, never ends.
  (func $down (param $depth i32) (result i32)
    (i32.add
      (call $down (i32.add (local.get $depth) (i32.const 1)))
      (i32.const 1)))

  (func $handle (export "handle") (result i32)
    (drop (call $down (i32.const 0)))
    (i32.const 0))
)
