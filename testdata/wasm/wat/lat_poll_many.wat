;; lat_poll_many: one poll_oneoff with 2^24 subscriptions (more than its
;; memory holds): the host refuses the count before wazero reads any of
;; them. Expect handler-trap naming the cap.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $handle (export "handle") (result i32)
    (drop (call $poll_oneoff (i32.const 0) (i32.const 0) (i32.const 16777216) (i32.const 0)))
    (i32.const 0))
)
