;; loops.wat: loop shapes for the pass's loop versioning (instrument.go,
;; appendLoopOpen): branches out of versioned loops to every kind of label,
;; loops with results, a loop with a parameter (not versioned) around a
;; versioned one (loops_spin.wat has loops that never end). Every export
;; returns a checksum of the paths it took, so a branch that lands at the
;; wrong label changes its result. Built with
;;   wat2wasm --debug-names loops.wat
(module
  ;; Nested loops; the inner one leaves through br_table to a block inside
  ;; it, to itself, to the outer loop and to a block around both, through
  ;; br_if to that block and through br (inside an if) to the outer loop.
  (func (export "nested") (result i64)
    (local $i i32) (local $j i32) (local $acc i64)
    (block $done
      (loop $outer
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $done (i32.gt_u (local.get $i) (i32.const 60)))
        (local.set $j (i32.const 0))
        (loop $inner
          (local.set $j (i32.add (local.get $j) (i32.const 1)))
          (if (i32.gt_u (local.get $j) (i32.const 40))
            (then
              (local.set $acc (i64.add (local.get $acc) (i64.const 1000003)))
              (br $outer)))
          (block $skip
            (block $b2
              (block $b1
                (block $b0
                  (br_table $b0 $b1 $b2 $skip $inner $outer $b0
                    (i32.rem_u (i32.mul (local.get $i) (local.get $j)) (i32.const 11))))
                ;; $b0
                (local.set $acc (i64.add (i64.mul (local.get $acc) (i64.const 3)) (i64.extend_i32_u (local.get $j))))
                (br $inner))
              ;; $b1
              (local.set $acc (i64.add (local.get $acc) (i64.extend_i32_u (i32.mul (local.get $i) (i32.const 1000)))))
              (br_if $skip (i32.and (local.get $j) (i32.const 1)))
              (local.set $acc (i64.xor (local.get $acc) (i64.const 0x55))))
            ;; $b2
            (local.set $acc (i64.sub (local.get $acc) (i64.const 7)))
            (br_if $done (i32.and (i32.eq (local.get $i) (i32.const 59)) (i32.eq (local.get $j) (i32.const 13)))))
          ;; $skip
          (local.set $acc (i64.add (i64.rotl (local.get $acc) (i64.const 5)) (i64.const 1)))
          (br $inner))
        (br $outer)))
    (local.get $acc))

  ;; A loop with a result, inside a loop with a result: the inner one
  ;; leaves through br carrying a value to a block around both and
  ;; through br_if to the outer loop.
  (func (export "results") (result i64)
    (local $n i32) (local $m i32) (local $acc i64)
    (block $out (result i64)
      (i64.add
        (i64.const 5)
        (loop $l (result i64)
          (local.set $n (i32.add (local.get $n) (i32.const 1)))
          (local.set $m (i32.const 0))
          (i64.extend_i32_u
            (loop $k (result i32)
              (local.set $m (i32.add (local.get $m) (i32.const 1)))
              (local.set $acc (i64.add (local.get $acc) (i64.extend_i32_u (i32.mul (local.get $n) (local.get $m)))))
              (drop (br_if $out (i64.add (local.get $acc) (i64.const 1)) (i32.eq (local.get $n) (i32.const 3000))))
              (br_if $l (i32.eq (local.get $m) (i32.const 17)))
              (br_if $k (i32.lt_u (local.get $m) (i32.const 30)))
              (i32.const 99)))
          (local.set $acc (i64.add (local.get $acc)))
          (br_if $l (i32.lt_u (local.get $n) (i32.const 10000)))
          (local.get $acc)))))

  ;; A loop with a parameter keeps the plain check; the versioned loop
  ;; inside it branches back to it carrying a value, and to the function's
  ;; own label (a return).
  (func (export "params") (result i32)
    (local $x i32) (local $y i32)
    (i32.const 1)
    (loop $p (param i32) (result i32)
      (local.set $x)
      (local.set $y (i32.const 0))
      (loop $q
        (local.set $y (i32.add (local.get $y) (i32.const 1)))
        (drop (br_if 2 (i32.add (local.get $x) (local.get $y)) (i32.gt_u (local.get $x) (i32.const 200000))))
        (drop (br_if $p (i32.add (local.get $x) (local.get $y)) (i32.eq (local.get $y) (i32.const 9))))
        (br $q))
      (i32.const 0)))

;; A versioned loop that sets a local of every number and vector type,
  ;; signalling NaNs with changing payloads and negative zero among their
  ;; bits, for a few Slices of fuel, in a function with an i32 and an f32
  ;; parameter: each refill on the way, and the entry's, carries them
  ;; across the call of refill (appendSave), which must keep every bit. The
  ;; floats are only moved and reinterpreted, never computed with, so the
  ;; checksum does not depend on how an engine makes NaNs.
  (func (export "typed") (param $seed i32) (param $g f32) (result i64)
    (local $i i32) (local $a i64) (local $f f32) (local $d f64) (local $v v128)
    (local.set $a (i64.extend_i32_u (local.get $seed)))
    (local.set $f (f32.reinterpret_i32 (i32.const 0xffa00001)))
    (local.set $d (f64.reinterpret_i64 (i64.const 0xfff4000000000003)))
    (local.set $v (v128.const i64x2 0x8000000000000000 0x7ff8000000000001))
    (loop $l
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (local.set $a (i64.add (i64.rotl (local.get $a) (i64.const 7)) (i64.extend_i32_u (local.get $i))))
      ;; $f and $d stay signalling NaNs (an arithmetic copy would quiet
      ;; them), their payloads change
      (local.set $f (f32.reinterpret_i32 (i32.xor (i32.reinterpret_f32 (local.get $f)) (i32.and (local.get $i) (i32.const 0x1fffff)))))
      (local.set $d (f64.reinterpret_i64 (i64.xor (i64.reinterpret_f64 (local.get $d)) (i64.and (local.get $a) (i64.const 0x3ffffffffff)))))
      (local.set $v (v128.xor (local.get $v) (i64x2.splat (i64.rotl (local.get $a) (i64.extend_i32_u (local.get $i))))))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 300000))))
    (i64.xor
      (i64.xor (local.get $a) (i64.extend_i32_u (i32.xor (i32.reinterpret_f32 (local.get $f)) (i32.reinterpret_f32 (local.get $g)))))
      (i64.xor (i64.reinterpret_f64 (local.get $d))
        (i64.xor (i64x2.extract_lane 0 (local.get $v)) (i64x2.extract_lane 1 (local.get $v))))))
)
