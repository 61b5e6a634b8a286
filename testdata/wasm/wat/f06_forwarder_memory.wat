;; f06_forwarder_memory (red-team finding F06): a reactor with 200 MiB of linear memory
;; (give it memMB 210) whose handle writes all of it, without a newline, to stderr and to
;; stdout in one fd_write each. The host must not hold copies of such writes: its
;; forwarders keep at most a 64 KiB partial line and a 4 KiB tail per stream.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 3200)             ;; 200 MiB
  (func $spray
    (memory.fill (i32.const 64) (i32.const 65) (i32.const 209715000))
    (i32.store (i32.const 0) (i32.const 64))           ;; iov.buf
    (i32.store (i32.const 4) (i32.const 209715000))    ;; iov.len
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_initialize") (if (global.get $init) (then (call $spray))))
  (global $init (mut i32) (i32.const 0))
  (func (export "handle") (result i32) (call $spray) (i32.const 0)))
