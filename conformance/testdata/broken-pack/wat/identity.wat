;; identity: a reactor whose output is its input, byte for byte (the
;; sandboxd_v1 size/copy convention: input_read with len 0 learns the size).
;; Build: wat2wasm identity.wat -o identity.wasm
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)

  (func $handle (export "handle") (result i32)
    (local $size i32)
    (local $pages i32)
    (local.set $size (call $input_read (i32.const 0) (i32.const 0)))
    (if (i32.lt_s (local.get $size) (i32.const 0))
      (then (return (i32.const 1))))
    (local.set $pages
      (i32.shr_u (i32.add (local.get $size) (i32.const 65535)) (i32.const 16)))
    (if (i32.gt_u (local.get $pages) (memory.size))
      (then
        (if (i32.eq (memory.grow (i32.sub (local.get $pages) (memory.size))) (i32.const -1))
          (then (return (i32.const 1))))))
    (if (i32.lt_s (call $input_read (i32.const 0) (local.get $size)) (i32.const 0))
      (then (return (i32.const 1))))
    (if (result i32) (i32.eqz (call $output_set (i32.const 0) (local.get $size)))
      (then (i32.const 0))
      (else (i32.const 1))))
)
