;; Instance reset (pass version 3): a resettable module. Built with
;;   wat2wasm --debug-names reset.wat
(module
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 7))
  (global $c i32 (i32.const 1))
  (global $h (mut f64) (f64.const 2.5))
  (func (export "bump") (result i32)
    (global.set $g (i32.add (global.get $g) (global.get $c)))
    (global.set $h (f64.mul (global.get $h) (f64.const 2)))
    (i32.store (i32.const 16) (global.get $g))
    (global.get $g))
  (func (export "write") (result i32)
    (call $fd_write (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 0)))
  (func (export "close") (result i32)
    (call $fd_close (i32.const 99))))
