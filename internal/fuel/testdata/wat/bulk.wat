;; bulk.wat: the bulk memory and table instructions the pass replaces by
;; chunked helpers (bulk.go), at sizes above a chunk (64 KiB, 8192
;; elements), overlapping, out of bounds (a trap that must write nothing),
;; on dropped segments, and growth. The differential test runs every export
;; plain and instrumented and compares results, traps and the final memory.
(module
  (memory (export "memory") 8)
  (table $t 10 20000 funcref)
  (table $u 30000 funcref)
  (data $d "0123456789abcdefghijklmnopqrstuvwxyz")
  (elem $e func $f0 $f1 $f2 $f0 $f1 $f2)
  (func $f0 (result i32) (i32.const 10))
  (func $f1 (result i32) (i32.const 11))
  (func $f2 (result i32) (i32.const 12))
  (type $r (func (result i32)))

  ;; a pattern over [0, 300000) to copy around
  (func $pattern (local $i i32)
    (loop $l
      (i32.store8 (local.get $i) (i32.mul (local.get $i) (i32.const 31)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 300000)))))
  (func $sum (param $a i32) (param $n i32) (result i32) (local $s i32)
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $s (i32.add (i32.mul (local.get $s) (i32.const 33)) (i32.load8_u (local.get $a))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $l)))
    (local.get $s))

  (func (export "a_fill") (result i32)
    (memory.fill (i32.const 100) (i32.const 7) (i32.const 200000))
    (memory.fill (i32.const 5) (i32.const 9) (i32.const 0))
    (memory.fill (i32.const 524288) (i32.const 9) (i32.const 0)) ;; at the end, length 0: no trap
    (call $sum (i32.const 90) (i32.const 200020)))
  (func (export "b_fill_oob")
    ;; ends one byte past the memory: traps, writes nothing
    (memory.fill (i32.const 300000) (i32.const 1) (i32.const 224289)))
  (func (export "c_copy_forward") (result i32)
    (call $pattern)
    (memory.copy (i32.const 1000) (i32.const 1013) (i32.const 150000))
    (call $sum (i32.const 0) (i32.const 160000)))
  (func (export "d_copy_backward") (result i32)
    (call $pattern)
    (memory.copy (i32.const 1013) (i32.const 1000) (i32.const 150000))
    (call $sum (i32.const 0) (i32.const 160000)))
  (func (export "e_copy_oob")
    (memory.copy (i32.const 0) (i32.const 400000) (i32.const 124289)))
  (func (export "e_copy_oob_wrap")
    (memory.copy (i32.const 0xffffff00) (i32.const 0) (i32.const 0x200)))
  (func (export "f_init") (result i32)
    (memory.init $d (i32.const 70000) (i32.const 3) (i32.const 20))
    (memory.init $d (i32.const 70000) (i32.const 36) (i32.const 0)) ;; at the segment's end: no trap
    (call $sum (i32.const 69990) (i32.const 40)))
  (func (export "g_init_oob")
    (memory.init $d (i32.const 80000) (i32.const 30) (i32.const 7)))
  (func (export "h_init_dropped") (result i32)
    (data.drop $d)
    (memory.init $d (i32.const 80000) (i32.const 0) (i32.const 0)) ;; length 0: fine
    (i32.const 1))
  (func (export "i_init_dropped_trap")
    (memory.init $d (i32.const 80000) (i32.const 0) (i32.const 1)))
  (func (export "j_grow") (result i32)
    (i32.add
      (i32.mul (memory.grow (i32.const 2)) (i32.const 1000))
      (i32.add (memory.grow (i32.const 0)) (memory.grow (i32.const 70000))))) ;; the last one fails: -1

  (func (export "k_table_fill") (result i32)
    (drop (table.grow $u (ref.null func) (i32.const 20000)))
    (table.fill $u (i32.const 100) (ref.func $f1) (i32.const 40000))
    (i32.add (table.size $u)
      (i32.add (call_indirect $u (type $r) (i32.const 100)) (call_indirect $u (type $r) (i32.const 40099)))))
  (func (export "l_table_fill_oob")
    (table.fill $u (i32.const 49000) (ref.func $f1) (i32.const 1001)))
  (func (export "m_table_copy") (result i32)
    (table.fill $u (i32.const 0) (ref.func $f0) (i32.const 10000))
    (table.fill $u (i32.const 10000) (ref.func $f2) (i32.const 10000))
    (table.copy $u $u (i32.const 5) (i32.const 0) (i32.const 15000)) ;; backward
    (table.copy $u $u (i32.const 20000) (i32.const 9000) (i32.const 9000)) ;; forward
    (i32.add (call_indirect $u (type $r) (i32.const 10004))
      (i32.add (call_indirect $u (type $r) (i32.const 10005)) (call_indirect $u (type $r) (i32.const 29000)))))
  (func (export "n_table_init") (result i32)
    (table.init $t $e (i32.const 2) (i32.const 1) (i32.const 5))
    (table.init $t $e (i32.const 0) (i32.const 6) (i32.const 0))
    (i32.add (call_indirect $t (type $r) (i32.const 2)) (call_indirect $t (type $r) (i32.const 6))))
  (func (export "o_table_init_oob")
    (table.init $t $e (i32.const 0) (i32.const 2) (i32.const 5)))
  (func (export "p_table_grow") (result i32)
    (i32.add (i32.mul (table.grow $t (ref.func $f2) (i32.const 100)) (i32.const 100000))
      (i32.add (table.grow $t (ref.null func) (i32.const 0))
        (table.grow $t (ref.null func) (i32.const 19900))))) ;; past the maximum: -1
  (func (export "q_elem_drop_init") (result i32)
    (elem.drop $e)
    (table.init $t $e (i32.const 0) (i32.const 0) (i32.const 0))
    (i32.const 5))
  (func (export "r_table_copy_oob")
    (table.copy $t $u (i32.const 0) (i32.const 0) (i32.const 30000)))
)
