;; A pure-compute Extism plug-in: it imports nothing from extism:host/env
;; (only WASI), like Extism's noop and unreachable test plug-ins. Named with
;; modulePath #NAME it runs as an Extism plug-in (docs/extism.md "Which
;; modules are Extism plug-ins"); executor/extism_test.go.
;;   compute      sums 1..1000 in guest code, returns 0 (success, no output)
;;   fail         returns 3 (handler-error "handler returned 3")
;;   unreachable  traps (handler-trap)
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "compute") (result i32)
    (local $i i32) (local $sum i32)
    (drop (call $random_get (i32.const 0) (i32.const 8)))
    (loop $l
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (local.set $sum (i32.add (local.get $sum) (local.get $i)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 1000))))
    (i32.store (i32.const 16) (local.get $sum))
    (i32.const 0))
  (func (export "fail") (result i32) (i32.const 3))
  (func (export "unreachable") (result i32) unreachable))
