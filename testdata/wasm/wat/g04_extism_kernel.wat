;; G04: Extism kernel calls whose host work grows with the bytes they touch,
;; each in an endless loop, for the interrupt-latency suite and the G04
;; regression tests (executor/latency_test.go, executor/extism_test.go). The
;; entry is chosen with modulePath's #NAME.
;;   reset        alloc(900,000,000) once, then loop { reset; alloc(900 MB) }
;;                (the G04 reproducer: each reset cleared every kernel page,
;;                faulting in the ones never written, in one host call)
;;   reset_dirty  alloc(48 MiB), store a byte into each of its pages, reset;
;;                loop (each reset clears 48 MiB of written pages)
;;   store_loop   store_u64 over a 48 MiB block, page by page; loop
;;   load_loop    load_u64 over a 48 MiB block; loop
;;   var_huge     reset, var_set of a var as large as the store holds (1 MiB),
;;                var_get of it; loop
;;   churn        reset, alloc 100,000 16-byte blocks, free them all, then
;;                alloc/free 100,000 pairs over the freed list; loop
;;   var_too_big  one var_set of a 2 MiB value (larger than the store)
;;   http_body    loop { reset; http_request(the input as the request, a
;;                16 MiB body) }
;;   headers      http_request(the input), output the http_headers object
;;   output_big   alloc(480 MiB), output_set of it, return: the host's copy of
;;                the output (pages never written: zeros) after the guest
;;                returned is the call's only work
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/env" "reset" (func $reset))
  (import "extism:host/env" "load_u64" (func $load_u64 (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "var_set" (func $var_set (param i64 i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))
  (import "extism:host/env" "http_request" (func $http_request (param i64 i64) (result i64)))
  (import "extism:host/env" "http_headers" (func $http_headers (result i64)))
  (memory (export "memory") 1)

  (func (export "reset") (result i32)
    (drop (call $alloc (i64.const 900000000)))
    (loop $l
      (call $reset)
      (drop (call $alloc (i64.const 900000000)))
      (br $l))
    (i32.const 0))

  (func (export "reset_dirty") (result i32)
    (local $h i64) (local $off i64)
    (loop $l
      (call $reset)
      (local.set $h (call $alloc (i64.const 0x3000000)))
      (local.set $off (i64.const 0))
      (loop $page
        (call $store_u8 (i64.add (local.get $h) (local.get $off)) (i32.const 1))
        (local.set $off (i64.add (local.get $off) (i64.const 0x10000)))
        (br_if $page (i64.lt_u (local.get $off) (i64.const 0x3000000))))
      (br $l))
    (i32.const 0))

  (func (export "store_loop") (result i32)
    (local $h i64) (local $off i64)
    (local.set $h (call $alloc (i64.const 0x3000000)))
    (loop $l
      (call $store_u64 (i64.add (local.get $h) (local.get $off)) (local.get $off))
      (local.set $off (i64.rem_u (i64.add (local.get $off) (i64.const 0x10008)) (i64.const 0x2fffff8)))
      (br $l))
    (i32.const 0))

  (func (export "load_loop") (result i32)
    (local $h i64) (local $off i64)
    (local.set $h (call $alloc (i64.const 0x3000000)))
    (loop $l
      (drop (call $load_u64 (i64.add (local.get $h) (local.get $off))))
      (local.set $off (i64.rem_u (i64.add (local.get $off) (i64.const 0x10008)) (i64.const 0x2fffff8)))
      (br $l))
    (i32.const 0))

  ;; key: a new 8-byte block holding n.
  (func $key (param $n i64) (result i64)
    (local $k i64)
    (local.set $k (call $alloc (i64.const 8)))
    (call $store_u64 (local.get $k) (local.get $n))
    (local.get $k))

  ;; 1 MiB less the 8-byte key and the 64 bytes charged per var.
  (func (export "var_huge") (result i32)
    (local $v i64)
    (loop $l
      (call $reset)
      (local.set $v (call $alloc (i64.const 1048504)))
      (call $store_u8 (local.get $v) (i32.const 7))
      (call $var_set (call $key (i64.const 1)) (local.get $v))
      (call $free (call $var_get (call $key (i64.const 1))))
      (br $l))
    (i32.const 0))

  (func (export "var_too_big") (result i32)
    (call $var_set (call $key (i64.const 1)) (call $alloc (i64.const 0x200000)))
    (i32.const 0))

  (func (export "churn") (result i32)
    (local $first i64) (local $h i64) (local $last i64) (local $a i64) (local $b i64) (local $i i32)
    (loop $round
      (call $reset)
      (local.set $first (call $alloc (i64.const 16)))
      (local.set $last (local.get $first))
      (local.set $i (i32.const 1))
      (loop $fill
        (local.set $last (call $alloc (i64.const 16)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $fill (i32.lt_u (local.get $i) (i32.const 100000))))
      ;; blocks are 12 + 16 bytes apart
      (local.set $h (local.get $first))
      (loop $freeall
        (call $free (local.get $h))
        (local.set $h (i64.add (local.get $h) (i64.const 28)))
        (br_if $freeall (i64.le_u (local.get $h) (local.get $last))))
      (local.set $i (i32.const 0))
      (loop $reuse
        (local.set $a (call $alloc (i64.const 16)))
        (local.set $b (call $alloc (i64.const 16)))
        (call $free (local.get $a))
        (call $free (local.get $b))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $reuse (i32.lt_u (local.get $i) (i32.const 100000))))
      (br $round))
    (i32.const 0))

  ;; saveInput copies the input to linear memory at 1024 (reset empties the
  ;; kernel, input included); request makes a new block holding it
  ;; (http_request frees it).
  (global $n (mut i64) (i64.const 0))
  (func $saveInput
    (local $i i64)
    (global.set $n (call $input_length))
    (loop $copy
      (i32.store8 (i32.add (i32.const 1024) (i32.wrap_i64 (local.get $i))) (call $input_load_u8 (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $copy (i64.lt_u (local.get $i) (global.get $n)))))
  (func $request (result i64)
    (local $r i64) (local $i i64)
    (local.set $r (call $alloc (global.get $n)))
    (loop $copy
      (call $store_u8 (i64.add (local.get $r) (local.get $i)) (i32.load8_u (i32.add (i32.const 1024) (i32.wrap_i64 (local.get $i)))))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $copy (i64.lt_u (local.get $i) (global.get $n))))
    (local.get $r))

  (func (export "http_body") (result i32)
    (local $body i64)
    (call $saveInput)
    (loop $l
      (call $reset)
      (local.set $body (call $alloc (i64.const 0x1000000)))
      (call $store_u8 (local.get $body) (i32.const 120))
      (call $free (call $http_request (call $request) (local.get $body)))
      (br $l))
    (i32.const 0))

  (func (export "headers") (result i32)
    (local $h i64)
    (call $saveInput)
    (call $free (call $http_request (call $request) (i64.const 0)))
    (local.set $h (call $http_headers))
    (call $output_set (local.get $h) (call $length (local.get $h)))
    (i32.const 0))

  (func (export "output_big") (result i32)
    (local $h i64)
    (local.set $h (call $alloc (i64.const 0x1e000000)))
    (call $output_set (local.get $h) (i64.const 0x1e000000))
    (i32.const 0)))
