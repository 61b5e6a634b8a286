;; exit_error_command: a WASI command that writes "fatal: bad thing\n" to
;; stderr and exits with code 3, without writing to stdout.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param $fd i32) (param $iovs i32) (param $iovs_len i32) (param $nwritten i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  (memory (export "memory") 1)
  ;; iovec {buf = 16, len = 17} at 0, nwritten at 8, the message at 16
  (data (i32.const 0) "\10\00\00\00\11\00\00\00")
  (data (i32.const 16) "fatal: bad thing\n")

  (func $_start (export "_start")
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $proc_exit (i32.const 3)))
)
