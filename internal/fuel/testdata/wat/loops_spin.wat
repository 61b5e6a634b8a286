;; loops_spin.wat: loops that never end, in the shapes of loops.wat (nested
;; versioned loops, a versioned loop with a result, a loop with a parameter
;; around a versioned one): only fuel, an interrupt or the end of the call's
;; context stops them. Built with
;;   wat2wasm --debug-names loops_spin.wat
(module
  (func (export "spin_nested")
    (loop $a
      (loop $b
        (br_if $b (i32.const 0))
        (br $a))))
  (func (export "spin_result") (result i32)
    (loop $r (result i32)
      (block $x
        (loop $s
          (br_if $x (i32.const 1))
          (br $s)))
      (br $r)))
  (func (export "spin_params") (result i32)
    (i32.const 0)
    (loop $p (param i32) (result i32)
      (loop $q
        (br_if $q (i32.const 0)))
      (i32.add (i32.const 1))
      (br $p))))
