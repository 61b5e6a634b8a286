;; live_fill: a liveness-test hostile guest (server TestServeLivenessHostile):
;; handle loops on memory.fill over 60 MiB, almost all of what memMB 64
;; allows. Each iteration is one bulk operation: only its chunking lets the
;; Go runtime (GC stop-the-world, other calls) in while it runs.
(module
  (memory (export "memory") 960)
  (func (export "handle") (result i32)
    (local $i i32)
    (loop $fill
      (memory.fill (i32.const 0) (local.get $i) (i32.const 62914560))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $fill))
    (i32.const 0)))
