;; lat_iovecs: one fd_write to stdout with 2^20 (empty) iovecs filling 8 MiB
;; of memory: wazero would walk them all in one host call; the host refuses
;; the count (over IOV_MAX). Expect handler-trap naming the cap.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 129)
  (func $handle (export "handle") (result i32)
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1048576) (i32.const 8388608)))
    (i32.const 0))
)
