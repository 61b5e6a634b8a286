;; A raw Extism ABI plug-in with two exports, so one module backs two tools
;; chosen by a #NAME suffix on modulePath (cmd/sandboxd/extism_serve_test.go:
;; a pack index whose tools name two.wasm#echo and two.wasm#shout).
;; Compiled with wat2wasm at test time; nothing built is committed.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)

  ;; echo: the output is the input block itself.
  (func (export "echo") (result i32)
    (call $output_set (call $input_offset) (call $input_length))
    (i32.const 0))

  ;; shout: the input with ASCII a-z upper-cased, in a new block.
  (func (export "shout") (result i32)
    (local $n i64) (local $h i64) (local $i i64) (local $b i32)
    (local.set $n (call $input_length))
    (local.set $h (call $alloc (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (local.set $b (call $input_load_u8 (local.get $i)))
        (if (i32.and (i32.ge_u (local.get $b) (i32.const 97)) (i32.le_u (local.get $b) (i32.const 122)))
          (then (local.set $b (i32.sub (local.get $b) (i32.const 32)))))
        (call $store_u8 (i64.add (local.get $h) (local.get $i)) (local.get $b))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $next)))
    (call $output_set (local.get $h) (local.get $n))
    (i32.const 0))
)
