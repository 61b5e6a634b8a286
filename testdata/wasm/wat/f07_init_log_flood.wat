;; f07_init_log_flood (red-team finding F07): _initialize calls sandboxd_v1.log 20,000 times
;; with a 64 KiB line, then writes 4 MiB to stdout and stderr in 64 KiB lines. Logs and
;; output during initialisation get the caps of a call: 1000 lines / 1 MiB of logs and
;; 1 MiB forwarded per stream and instance. handle answers null.
(module
  (import "sandboxd_v1" "log" (func $log (param i32 i32 i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func $init (export "_initialize")
    (local $i i32)
    (memory.fill (i32.const 0) (i32.const 65) (i32.const 65536))
    (i32.store8 (i32.const 65535) (i32.const 10))      ;; each 64 KiB write is one line
    (loop $l
      (call $log (i32.const 1) (i32.const 0) (i32.const 65536))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 20000))))
    (i32.store (i32.const 65536) (i32.const 0))         ;; iov.buf
    (i32.store (i32.const 65540) (i32.const 65536))     ;; iov.len
    (local.set $i (i32.const 0))
    (loop $w
      (drop (call $fd_write (i32.const 1) (i32.const 65536) (i32.const 1) (i32.const 65544)))
      (drop (call $fd_write (i32.const 2) (i32.const 65536) (i32.const 1) (i32.const 65544)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $w (i32.lt_u (local.get $i) (i32.const 64)))))
  (func $handle (export "handle") (result i32) (i32.const 0))
)
