;; extism_echo: the echo logic of testdata/wasm/wat/echo_reactor.wat in
;; Extism's ABI, the way its PDKs move bytes: the input is read into guest
;; memory with 8-byte input_load_u64 loads (input_load_u8 for the tail), then
;; copied into a kernel block from alloc with store_u64/store_u8 and set as
;; the output. Export "run" returns 0.
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))

  (memory (export "memory") 1)

  (func (export "run") (result i32)
    (local $n i64)
    (local $i i64)
    (local $off i64)
    (local $pages i32)
    (local.set $n (call $input_length))
    ;; grow memory so [0, n) fits
    (local.set $pages
      (i32.wrap_i64 (i64.shr_u (i64.add (local.get $n) (i64.const 65535)) (i64.const 16))))
    (if (i32.gt_u (local.get $pages) (memory.size))
      (then
        (if (i32.eq (memory.grow (i32.sub (local.get $pages) (memory.size))) (i32.const -1))
          (then (return (i32.const 1))))))
    ;; input -> guest memory
    (local.set $i (i64.const 0))
    (block $done8
      (loop $load8
        (br_if $done8 (i64.gt_u (i64.add (local.get $i) (i64.const 8)) (local.get $n)))
        (i64.store (i32.wrap_i64 (local.get $i)) (call $input_load_u64 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 8)))
        (br $load8)))
    (block $done1
      (loop $load1
        (br_if $done1 (i64.ge_u (local.get $i) (local.get $n)))
        (i32.store8 (i32.wrap_i64 (local.get $i)) (call $input_load_u8 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $load1)))
    ;; guest memory -> a kernel block -> output
    (local.set $off (call $alloc (local.get $n)))
    (local.set $i (i64.const 0))
    (block $sdone8
      (loop $store8
        (br_if $sdone8 (i64.gt_u (i64.add (local.get $i) (i64.const 8)) (local.get $n)))
        (call $store_u64 (i64.add (local.get $off) (local.get $i)) (i64.load (i32.wrap_i64 (local.get $i))))
        (local.set $i (i64.add (local.get $i) (i64.const 8)))
        (br $store8)))
    (block $sdone1
      (loop $store1
        (br_if $sdone1 (i64.ge_u (local.get $i) (local.get $n)))
        (call $store_u8 (i64.add (local.get $off) (local.get $i)) (i32.load8_u (i32.wrap_i64 (local.get $i))))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $store1)))
    (call $output_set (local.get $off) (local.get $n))
    (i32.const 0))
)
