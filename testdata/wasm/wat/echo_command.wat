;; echo_command: a plain WASI command that copies stdin to stdout, so its
;; output is its input. Exit code 0 (returning from _start).
(module
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param $fd i32) (param $iovs i32) (param $iovs_len i32) (param $nread i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param $fd i32) (param $iovs i32) (param $iovs_len i32) (param $nwritten i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  (memory (export "memory") 1)

  ;; Memory layout:
  ;;   0.. 7  read iovec  {buf, len}
  ;;   8..15  write iovec {buf, len}
  ;;  16..19  nread
  ;;  20..23  nwritten
  ;;  1024..  a 32 KiB buffer
  (global $buf i32 (i32.const 1024))
  (global $buf_len i32 (i32.const 32768))

  (func $_start (export "_start")
    (local $n i32)
    (local $off i32)
    (i32.store (i32.const 0) (global.get $buf))
    (i32.store (i32.const 4) (global.get $buf_len))
    (loop $read
      ;; read a chunk from stdin (fd 0); a WASI error exits 1
      (if (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16))
        (then (call $proc_exit (i32.const 1))))
      (local.set $n (i32.load (i32.const 16)))
      ;; 0 bytes read: end of input
      (if (i32.eqz (local.get $n)) (then (return)))
      ;; write all n bytes to stdout (fd 1), looping over short writes
      (local.set $off (i32.const 0))
      (loop $write
        (i32.store (i32.const 8) (i32.add (global.get $buf) (local.get $off)))
        (i32.store (i32.const 12) (i32.sub (local.get $n) (local.get $off)))
        (if (call $fd_write (i32.const 1) (i32.const 8) (i32.const 1) (i32.const 20))
          (then (call $proc_exit (i32.const 1))))
        (local.set $off (i32.add (local.get $off) (i32.load (i32.const 20))))
        (br_if $write (i32.lt_u (local.get $off) (local.get $n))))
      (br $read)))
)
