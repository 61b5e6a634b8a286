;; sleep: a reactor whose handle sleeps 50 ms (one poll_oneoff clock
;; subscription, relative) and outputs {}. It spends wall time, not CPU:
;; admission tests use it so that their latencies do not depend on how
;; loaded the machine's cores are.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; the output at 0
  (data (i32.const 0) "{}")
  (func $handle (export "handle") (result i32)
    ;; one subscription at 64 (48 bytes): userdata 0, tag 0 (clock),
    ;; clock id 1 (monotonic) at +16, timeout 50 ms in ns at +24,
    ;; precision 0 at +32, flags 0 (relative) at +40; the event at 128,
    ;; the count of events at 192.
    (i32.store8 (i32.const 72) (i32.const 0))
    (i32.store (i32.const 80) (i32.const 1))
    (i64.store (i32.const 88) (i64.const 50000000))
    (drop (call $poll_oneoff (i32.const 64) (i32.const 128) (i32.const 1) (i32.const 192)))
    (if (result i32)
      (i32.eqz (call $output_set (i32.const 0) (i32.const 2)))
      (then (i32.const 0))
      (else (i32.const 1))))
)
