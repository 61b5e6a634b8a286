;; f18_array_output: a reactor whose input is a JSON integer N; it outputs
;; the JSON array [0,0,…,0] of about N bytes (N/2+1 elements), growing its
;; memory to fit. For F18 (schema validation of huge outputs): the output
;; is cheap for the guest and costly for a host that decodes it into a tree.
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "handle") (result i32)
    (local $len i32) (local $i i32) (local $n i32) (local $c i32) (local $p i32) (local $end i32)
    ;; the input (at most 64 bytes) at offset 0
    (local.set $len (call $input_read (i32.const 0) (i32.const 64)))
    (if (i32.gt_s (local.get $len) (i32.const 64)) (then (local.set $len (i32.const 64))))
    (block $done
      (loop $digits
        (br_if $done (i32.ge_s (local.get $i) (local.get $len)))
        (local.set $c (i32.load8_u (local.get $i)))
        (br_if $done (i32.lt_u (local.get $c) (i32.const 48)))
        (br_if $done (i32.gt_u (local.get $c) (i32.const 57)))
        (local.set $n (i32.add (i32.mul (local.get $n) (i32.const 10)) (i32.sub (local.get $c) (i32.const 48))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $digits)))
    ;; at least "[0]", an even count of "0," pairs
    (local.set $n (i32.and (i32.add (local.get $n) (i32.const 4)) (i32.const -4)))
    (if (i32.lt_u (local.get $n) (i32.const 4)) (then (local.set $n (i32.const 4))))
    ;; the array, n+3 bytes, goes at 64: "[" then n/2 times "0," then "0]"
    (local.set $end (i32.add (i32.const 67) (local.get $n)))
    (local.set $c (i32.sub (i32.add (i32.shr_u (local.get $end) (i32.const 16)) (i32.const 1)) (memory.size)))
    (if (i32.gt_s (local.get $c) (i32.const 0))
      (then (if (i32.eq (memory.grow (local.get $c)) (i32.const -1)) (then unreachable))))
    (memory.fill (i32.const 64) (i32.const 0x30) (i32.add (local.get $n) (i32.const 2)))
    (local.set $p (i32.const 66))
    (loop $commas
      (i32.store8 (local.get $p) (i32.const 0x2c))
      (local.set $p (i32.add (local.get $p) (i32.const 2)))
      (br_if $commas (i32.le_u (local.get $p) (i32.add (i32.const 64) (local.get $n)))))
    (i32.store8 (i32.const 64) (i32.const 0x5b))
    (i32.store8 (i32.add (i32.const 66) (local.get $n)) (i32.const 0x5d))
    (drop (call $output_set (i32.const 64) (i32.add (local.get $n) (i32.const 3))))
    (i32.const 0)))
