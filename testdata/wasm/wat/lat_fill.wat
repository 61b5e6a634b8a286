;; lat_fill: F01's bulk-memory guest (interrupt-latency tests). handle loops
;; on memory.fill over 60 MiB, almost all of what memMB 64 allows: a few
;; instructions per iteration, each running a 60 MiB memset.
(module
  (memory (export "memory") 960)
  (func $handle (export "handle") (result i32)
    (local $i i32)
    (loop $fill
      (memory.fill (i32.const 0) (local.get $i) (i32.const 62914560))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $fill))
    (i32.const 0))
)
