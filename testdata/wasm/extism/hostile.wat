;; Raw Extism ABI guests for sandboxd's Extism kernel tests: handles past
;; kernel memory, huge allocations, a var flood, an output past memory, and
;; the kernel's handle layout. Compiled with wat2wasm at test time
;; (executor/extism_test.go); nothing built is committed.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "load_u64" (func $load_u64 (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "var_set" (func $var_set (param i64 i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))

  ;; load_u64 at 1 TiB: far outside kernel memory.
  (func (export "load_wild") (result i32)
    (drop (call $load_u64 (i64.const 0x10000000000)))
    (i32.const 0))

  ;; store_u8 at 8 GiB.
  (func (export "store_wild") (result i32)
    (call $store_u8 (i64.const 0x200000000) (i32.const 1))
    (i32.const 0))

  ;; input_load_u8 past the input's end.
  (func (export "input_wild") (result i32)
    (drop (call $input_load_u8 (i64.add (call $input_length) (i64.const 1000))))
    (i32.const 0))

  ;; output_set of 1 TiB from offset 0.
  (func (export "output_past") (result i32)
    (call $output_set (i64.const 0) (i64.const 0x10000000000))
    (i32.const 0))

  ;; alloc(1 TiB) and alloc(1 GiB) (over memMB) return 0; a small block then
  ;; still works and holds 42.
  (func (export "huge_alloc") (result i32)
    (local $h i64)
    (if (i64.ne (call $alloc (i64.const 0x10000000000)) (i64.const 0)) (then unreachable))
    (if (i64.ne (call $alloc (i64.const 0x40000000)) (i64.const 0)) (then unreachable))
    (local.set $h (call $alloc (i64.const 8)))
    (call $store_u64 (local.get $h) (i64.const 42))
    (call $output_set (local.get $h) (i64.const 8))
    (i32.const 0))

  ;; var_set with new 8-byte keys and 1 KiB values until the store is full
  ;; (at most 100000 rounds).
  (func (export "var_flood") (result i32)
    (local $i i64) (local $k i64) (local $v i64)
    (loop $next
      (local.set $k (call $alloc (i64.const 8)))
      (call $store_u64 (local.get $k) (local.get $i))
      (local.set $v (call $alloc (i64.const 1024)))
      (call $var_set (local.get $k) (local.get $v))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $next (i64.lt_u (local.get $i) (i64.const 100000))))
    (i32.const 0))

  ;; The kernel's handle layout: outputs input_offset(), a new block's
  ;; handle and the input's length() as three little-endian u64s.
  (func (export "offsets") (result i32)
    (local $h i64)
    (local.set $h (call $alloc (i64.const 24)))
    (call $store_u64 (local.get $h) (call $input_offset))
    (call $store_u64 (i64.add (local.get $h) (i64.const 8)) (local.get $h))
    (call $store_u64 (i64.add (local.get $h) (i64.const 16)) (call $length (call $input_offset)))
    (call $output_set (local.get $h) (i64.const 24))
    (i32.const 0))

  ;; An endless loop of kernel calls: stopped by the fuel budget, cpuMs and
  ;; the deadline at its host boundaries.
  (func (export "spin_host") (result i32)
    (loop $again
      (drop (call $length (i64.const 77)))
      (br $again))
    (i32.const 0))

  ;; alloc(1) until it returns 0 (at most 10 million times); returns how
  ;; many blocks it got (a non-zero return: handler-error, details.returned).
  (func (export "tiny_allocs") (result i32)
    (local $n i64)
    (block $done
      (loop $more
        (br_if $done (i64.eqz (call $alloc (i64.const 1))))
        (local.set $n (i64.add (local.get $n) (i64.const 1)))
        (br_if $more (i64.lt_u (local.get $n) (i64.const 10000000)))))
    (i32.wrap_i64 (local.get $n)))
)
