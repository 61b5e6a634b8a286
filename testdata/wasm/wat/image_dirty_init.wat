;; image_dirty_init: an _initialize that changes host state (it closes fd 1),
;; so its tool must not get an instance image (executor/image.go): an
;; instance loaded from an image would have fd 1 open. Memory is 640 KiB
;; (mapped, were there an image). A call answers {"inits":N,"fd1":N}: inits
;; is how many times _initialize ran in this instance (always 1), fd1 is 1
;; when fd 1 is open (always 0).
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_fdstat_get" (func $fd_fdstat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))

  (memory (export "memory") 10)
  (global $inits (mut i32) (i32.const 0))
  (data (i32.const 2048) "{\"inits\":0,\"fd1\":0}")

  (func $initialize (export "_initialize")
    (global.set $inits (i32.add (global.get $inits) (i32.const 1)))
    (i32.store (i32.const 300000) (i32.const 1))
    (drop (call $fd_close (i32.const 1))))

  (func $handle (export "handle") (result i32)
    (i32.store8 (i32.const 2057) (i32.add (i32.const 48) (global.get $inits)))
    (i32.store8 (i32.const 2065) (i32.add (i32.const 48) (i32.eqz (call $fd_fdstat_get (i32.const 1) (i32.const 4096)))))
    (global.set $inits (i32.add (global.get $inits) (i32.const 1)))
    (if (result i32) (i32.eqz (call $output_set (i32.const 2048) (i32.const 19)))
      (then (i32.const 0))
      (else (i32.const 1))))
)
