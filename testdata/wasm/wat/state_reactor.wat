;; state_reactor: every kind of state a call can change, to prove that a
;; context-isolated call sees a fresh instance (recycled or not). Each call
;; increments a mutable global ($g) and a counter in linear memory (at 1024,
;; set by a data segment), writes them into a template (itself in a data
;; segment) and outputs {"g":0,"m":0,"pages":0,"fd1":0} with g, m, pages (memory.size) and fd1
;; (1 when fd 1 is open) filled in: a fresh instance always answers
;; {"g":1,"m":1,"pages":1,"fd1":1}. The input's size picks what else the
;; call does:
;;   7 bytes (e.g. {"a":1}):   trap (unreachable) after changing its state
;;   8 bytes (e.g. {"aa":1}):  grow memory by a page first (pages becomes 2)
;;   9 bytes (e.g. {"aaa":1}): close fd 1 (fd_close: host state) after answering
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_fdstat_get" (func $fd_fdstat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))

  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 0))
  (data (i32.const 1024) "\00\00\00\00")
  (data (i32.const 2048) "{\"g\":0,\"m\":0,\"pages\":0,\"fd1\":0}")

  (func $digit (param $at i32) (param $v i32)
    (i32.store8 (local.get $at) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10)))))

  (func $handle (export "handle") (result i32)
    (local $size i32)
    (local.set $size (call $input_read (i32.const 0) (i32.const 0)))
    (if (i32.eq (local.get $size) (i32.const 8))
      (then (drop (memory.grow (i32.const 1)))))
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (i32.store (i32.const 1024) (i32.add (i32.load (i32.const 1024)) (i32.const 1)))
    (call $digit (i32.const 2053) (global.get $g))
    (call $digit (i32.const 2059) (i32.load (i32.const 1024)))
    (call $digit (i32.const 2069) (memory.size))
    (call $digit (i32.const 2077) (i32.eqz (call $fd_fdstat_get (i32.const 1) (i32.const 4096))))
    (if (i32.eq (local.get $size) (i32.const 7))
      (then unreachable))
    (if (i32.eq (local.get $size) (i32.const 9))
      (then (drop (call $fd_close (i32.const 1)))))
    (if (result i32) (i32.eqz (call $output_set (i32.const 2048) (i32.const 31)))
      (then (i32.const 0))
      (else (i32.const 1))))
)
