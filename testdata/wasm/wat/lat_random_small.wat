;; lat_random_small: handle loops on WASI random_get of 256 KiB (F01).
;; Interrupt-latency tests.
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 4)
  (func $handle (export "handle") (result i32)
    (loop $more
      (drop (call $random_get (i32.const 0) (i32.const 262144)))
      (br $more))
    (i32.const 0))
)
