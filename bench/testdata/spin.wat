;; spin: a tight compute loop with no imports, exported both as sandboxd's
;; reactor "handle" and as Extism's "run". It runs 2^24 iterations of a
;; linear congruential step and stores the result (so the loop has an
;; observable effect), then returns 0. One loop back-edge per iteration:
;; the worst case for interruption checks at loop headers.
(module
  (memory (export "memory") 1)

  (func $spin (result i32)
    (local $i i32)
    (local $x i64)
    (local.set $x (i64.const 1))
    (local.set $i (i32.const 16777216))
    (loop $again
      (local.set $x (i64.add (i64.mul (local.get $x) (i64.const 6364136223846793005)) (i64.const 1442695040888963407)))
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (br_if $again (local.get $i)))
    (i64.store (i32.const 0) (local.get $x))
    (i32.const 0))

  (export "handle" (func $spin))
  (export "run" (func $spin))
)
