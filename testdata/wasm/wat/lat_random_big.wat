;; lat_random_big: F01's random_get guest: handle loops on WASI random_get
;; over almost all of a 4 MiB memory (one fuel check per iteration, ~1 ms of
;; host work each). Interrupt-latency tests.
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 64)
  (func $handle (export "handle") (result i32)
    (loop $more
      (drop (call $random_get (i32.const 0) (i32.const 4128768)))
      (br $more))
    (i32.const 0))
)
