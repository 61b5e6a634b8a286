;; Not resettable: a state-changing import is used other than by a direct call.
(module
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (table 1 funcref)
  (elem (i32.const 0) $fd_close)
  (func (export "run") (result i32) (call_indirect (param i32) (result i32) (i32.const 3) (i32.const 0))))
