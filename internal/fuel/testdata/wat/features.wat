;; features.wat: one module that uses every feature the pass must carry
;; through unchanged: an imported global (so the fuel global's index is not
;; the count of defined globals), a start function, active and passive
;; element segments, bulk memory, sign extension, saturating conversions,
;; reference types, multi-value functions and blocks, SIMD, br_table,
;; nested loops and recursion. Every export takes no arguments.
(module
  (import "genv" "base" (global $base i32))
  (import "env" "log" (func $log (param i32)))
  (memory (export "memory") 1)
  (table $t 4 funcref)
  (table $ext 2 externref)
  (global $counter (mut i32) (i32.const 0))
  (global $wide (export "wide") (mut i64) (i64.const 5))
  (elem (table $t) (i32.const 0) func $one $two)
  (elem $passive funcref (ref.func $one))
  (elem declare func $two)
  (data $d "hello world")
  (data (i32.const 200) "\01\02\03\04")
  (start $init)

  (func $init (global.set $counter (i32.add (global.get $base) (i32.const 100))))
  (func $one (result i32) (i32.const 1))
  (func $two (result i32) (i32.const 2))
  (func $pair (param i32) (result i32 i32) (local.get 0) (i32.const 3))

  (func (export "bulk") (result i32)
    (memory.init $d (i32.const 16) (i32.const 0) (i32.const 11))
    (memory.copy (i32.const 32) (i32.const 16) (i32.const 11))
    (memory.fill (i32.const 64) (i32.const 0x41) (i32.const 8))
    (data.drop $d)
    (table.init $t $passive (i32.const 2) (i32.const 0) (i32.const 1))
    (elem.drop $passive)
    (table.copy $t $t (i32.const 3) (i32.const 1) (i32.const 1))
    (i32.add (call_indirect (result i32) (i32.const 2))
             (call_indirect (result i32) (i32.const 3))))

  (func (export "signext") (result i64)
    (i64.add (i64.extend8_s (i64.const 0x80))
             (i64.extend_i32_s (i32.extend16_s (i32.const 0x8001)))))

  (func (export "satconv") (result i32)
    (i32.add (i32.trunc_sat_f64_s (f64.const 1e30))
             (i32.trunc_sat_f32_u (f32.const -5))))

  (func (export "reftypes") (result i32)
    (table.set $ext (i32.const 1) (ref.null extern))
    (drop (table.grow $t (ref.func $two) (i32.const 2)))
    (table.fill $t (i32.const 4) (ref.null func) (i32.const 2))
    (i32.add
      (i32.add (ref.is_null (table.get $t (i32.const 3))) (table.size $t))
      (ref.is_null (table.get $ext (i32.const 1)))))

  (func (export "multivalue") (result i32)
    (call $pair (i32.const 4))
    (block (param i32 i32) (result i32) (i32.mul))
    (i32.const 1)
    (loop $l (param i32 i32) (result i32) (i32.sub)))

  (func (export "simd") (result i32)
    (i32x4.extract_lane 1
      (i32x4.add (v128.const i32x4 1 2 3 4)
                 (i8x16.shuffle 4 5 6 7 0 1 2 3 8 9 10 11 12 13 14 15
                   (v128.load (i32.const 200)) (v128.const i32x4 10 20 30 40)))))

  (func (export "select") (result i32)
    (select (result i32) (i32.const 7) (i32.const 8) (global.get $counter)))

  (func $fib (param i32) (result i32)
    (if (result i32) (i32.lt_u (local.get 0) (i32.const 2))
      (then (local.get 0))
      (else (i32.add (call $fib (i32.sub (local.get 0) (i32.const 1)))
                     (call $fib (i32.sub (local.get 0) (i32.const 2)))))))
  (func (export "fib") (result i32) (call $fib (i32.const 20)))

  (func (export "nested") (result i32) (local $i i32) (local $j i32) (local $s i32)
    (block $done
      (loop $outer
        (br_if $done (i32.ge_u (local.get $i) (i32.const 100)))
        (local.set $j (i32.const 0))
        (loop $inner
          (local.set $s (i32.add (local.get $s) (i32.mul (local.get $i) (local.get $j))))
          (local.set $j (i32.add (local.get $j) (i32.const 1)))
          (br_if $inner (i32.lt_u (local.get $j) (local.get $i))))
        (block $a (block $b (block $c
          (br_table $a $b $c (i32.rem_u (local.get $i) (i32.const 3))))
          (local.set $s (i32.add (local.get $s) (i32.const 1))))
          (local.set $s (i32.add (local.get $s) (i32.const 2))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $outer)))
    (call $log (local.get $s))
    (local.get $s))

  (func (export "imported") (result i32)
    (call $log (global.get $counter))
    (global.get $base))

  (func (export "trap") (result i32)
    (i32.div_u (i32.const 1) (i32.const 0)))
)
