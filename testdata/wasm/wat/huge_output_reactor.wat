;; huge_output_reactor: a reactor that grows its memory to 48 MiB and passes
;; all of it to output_set as one JSON string ("xxx…x"), so the only thing
;; wrong with the output is its size. handle returns the negated output_set
;; error number when it failed (5 for too-large, 15 for memory-budget-
;; exceeded), else 0. If the growth itself is refused, it traps.
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; 768 pages * 64 KiB = 48 MiB = 50331648 bytes
  (global $pages i32 (i32.const 768))
  (global $size i32 (i32.const 50331648))

  (func $handle (export "handle") (result i32)
    (local $r i32)
    (if (i32.eq (memory.grow (i32.sub (global.get $pages) (memory.size))) (i32.const -1))
      (then unreachable))
    ;; "xxx…x": a quote, size-2 bytes of x, a quote
    (memory.fill (i32.const 0) (i32.const 0x78) (global.get $size))
    (i32.store8 (i32.const 0) (i32.const 0x22))
    (i32.store8 (i32.sub (global.get $size) (i32.const 1)) (i32.const 0x22))
    (local.set $r (call $output_set (i32.const 0) (global.get $size)))
    (if (result i32) (i32.lt_s (local.get $r) (i32.const 0))
      (then (i32.sub (i32.const 0) (local.get $r)))
      (else (i32.const 0))))
)
