;; lat_log: handle loops on log of a 64 KiB line (the per-line cap; the host
;; drops lines past its per-call caps, but each call still costs a copy).
;; Interrupt-latency tests.
(module
  (import "sandboxd_v1" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 2)
  (func $handle (export "handle") (result i32)
    (loop $more
      (call $log (i32.const 1) (i32.const 0) (i32.const 65536))
      (br $more))
    (i32.const 0))
)
