;; entropy: a reactor whose output {"t":WALL,"m":MONO,"r":RAND} shows what a
;; guest sees of the host: the wall clock and the monotonic clock in
;; nanoseconds (clock_time_get 0 and 1) and 8 bytes of random_get as an
;; unsigned little-endian integer. Used by executor's deterministic tests.
;; Build: wat2wasm entropy.wat -o entropy.wasm
(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  (data (i32.const 0) "{\"t\":")
  (data (i32.const 16) ",\"m\":")
  (data (i32.const 32) ",\"r\":")

  ;; $put writes v in decimal at out and returns the position after it.
  (func $put (param $v i64) (param $out i32) (result i32)
    (local $p i32)
    (local $n i32)
    (local.set $p (i32.const 2048))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p)
        (i32.add (i32.const 48) (i32.wrap_i64 (i64.rem_u (local.get $v) (i64.const 10)))))
      (local.set $v (i64.div_u (local.get $v) (i64.const 10)))
      (br_if $digits (i64.ne (local.get $v) (i64.const 0))))
    (local.set $n (i32.sub (i32.const 2048) (local.get $p)))
    (memory.copy (local.get $out) (local.get $p) (local.get $n))
    (i32.add (local.get $out) (local.get $n)))

  (func $handle (export "handle") (result i32)
    (local $o i32)
    (drop (call $clock (i32.const 0) (i64.const 1) (i32.const 1024)))
    (drop (call $clock (i32.const 1) (i64.const 1) (i32.const 1032)))
    (drop (call $random (i32.const 1040) (i32.const 8)))
    (local.set $o (i32.const 4096))
    (memory.copy (local.get $o) (i32.const 0) (i32.const 5))
    (local.set $o (call $put (i64.load (i32.const 1024)) (i32.add (local.get $o) (i32.const 5))))
    (memory.copy (local.get $o) (i32.const 16) (i32.const 5))
    (local.set $o (call $put (i64.load (i32.const 1032)) (i32.add (local.get $o) (i32.const 5))))
    (memory.copy (local.get $o) (i32.const 32) (i32.const 5))
    (local.set $o (call $put (i64.load (i32.const 1040)) (i32.add (local.get $o) (i32.const 5))))
    (i32.store8 (local.get $o) (i32.const 125))
    (if (result i32) (i32.eqz (call $output_set (i32.const 4096)
                                 (i32.sub (i32.add (local.get $o) (i32.const 1)) (i32.const 4096))))
      (then (i32.const 0))
      (else (i32.const 1))))
)
