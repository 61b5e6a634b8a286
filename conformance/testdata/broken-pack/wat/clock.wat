;; clock: a reactor whose output {"t":N} is the wall clock in nanoseconds —
;; not deterministic unless the host fixes the clock.
(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  (data (i32.const 0) "{\"t\":")

  (func $handle (export "handle") (result i32)
    (local $t i64)
    (local $p i32)
    (local $n i32)
    (drop (call $clock (i32.const 0) (i64.const 1) (i32.const 1024)))
    (local.set $t (i64.load (i32.const 1024)))
    ;; digits right to left, ending at 255
    (local.set $p (i32.const 256))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p)
        (i32.add (i32.const 48) (i32.wrap_i64 (i64.rem_u (local.get $t) (i64.const 10)))))
      (local.set $t (i64.div_u (local.get $t) (i64.const 10)))
      (br_if $digits (i64.ne (local.get $t) (i64.const 0))))
    (local.set $n (i32.sub (i32.const 256) (local.get $p)))
    (memory.copy (i32.const 5) (local.get $p) (local.get $n))
    (i32.store8 (i32.add (i32.const 5) (local.get $n)) (i32.const 125))
    (if (result i32) (i32.eqz (call $output_set (i32.const 0) (i32.add (local.get $n) (i32.const 6))))
      (then (i32.const 0))
      (else (i32.const 1))))
)
