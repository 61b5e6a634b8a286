;; overdraft: a reactor whose handle sets its output {} (a host call, so a
;; check), then ends with a segment the fuel pass charges without a
;; comparison (pass version 9, charge per segment): after the block's end,
;; 100 x (i32.const 0; drop) = 200 units and the return value, 201. With a
;; fuel budget that this last segment passes, the call returns with no check
;; left to see it; the executor's check at the end of the call must fail it.
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  (data (i32.const 0) "{}")

  (func $handle (export "handle") (result i32)
    (drop (call $output_set (i32.const 0) (i32.const 2)))
    (block (nop))
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    i32.const 0 drop
    (i32.const 0))
)
