;; membomb: a reactor that grows its memory 16 pages (1 MiB) at a time until
;; memory.grow refuses (returns -1), then traps with unreachable. Under a
;; memMB cap the refusal comes at the cap, so the trap is a memMB failure.
(module
  (memory (export "memory") 1)

  (func $handle (export "handle") (result i32)
    (loop $grow
      (br_if $grow
        (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable)
)
