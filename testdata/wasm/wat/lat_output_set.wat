;; lat_output_set: handle loops on output_set of all of its 16 MiB memory
;; (give it memMB 64). Interrupt-latency tests.
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (memory (export "memory") 256)
  (func $handle (export "handle") (result i32)
    (loop $more
      (drop (call $output_set (i32.const 0) (i32.const 16777216)))
      (br $more))
    (i32.const 0))
)
