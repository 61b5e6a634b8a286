;; lat_fd_write: handle loops on WASI fd_write of 1 MiB to stdout (one
;; iovec at address 0 pointing at [16, 16+1 MiB)). Interrupt-latency tests.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 32)
  (data (i32.const 0) "\10\00\00\00\00\00\10\00")
  (func $handle (export "handle") (result i32)
    (loop $more
      (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
      (br $more))
    (i32.const 0))
)
