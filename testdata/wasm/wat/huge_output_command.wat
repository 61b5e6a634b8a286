;; huge_output_command: a WASI command that writes a 64 KiB buffer of "x" to
;; stdout forever. Write errors are ignored, so the host must stop it.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param $fd i32) (param $iovs i32) (param $iovs_len i32) (param $nwritten i32) (result i32)))

  ;; page 0: iovec {buf = 65536, len = 65536} at 0, nwritten at 8;
  ;; page 1: the buffer
  (memory (export "memory") 2)
  (data (i32.const 0) "\00\00\01\00\00\00\01\00")

  (func $_start (export "_start")
    (memory.fill (i32.const 65536) (i32.const 0x78) (i32.const 65536))
    (loop $forever
      (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
      (br $forever)))
)
