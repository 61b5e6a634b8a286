;; lat_copy: handle loops on memory.copy of 30 MiB (half of a 60 MiB memory
;; onto the other half) for the interrupt-latency tests; give it memMB 64.
(module
  (memory (export "memory") 960)
  (func $handle (export "handle") (result i32)
    (loop $copy
      (memory.copy (i32.const 0) (i32.const 31457280) (i32.const 31457280))
      (br $copy))
    (i32.const 0))
)
