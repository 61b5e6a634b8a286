;; big_min_memory: a valid reactor whose memory declares a minimum of 2000
;; pages (125 MiB). Under a smaller memMB it is refused before it runs.
;; If it runs, it outputs {}.
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 2000)
  (data (i32.const 0) "{}")

  (func $handle (export "handle") (result i32)
    (drop (call $output_set (i32.const 0) (i32.const 2)))
    (i32.const 0))
)
