;; Invalid on purpose (built with wat2wasm --no-check): the loop writes
;; local 1 of a function with one parameter and no locals — after the pass
;; adds its counter local, index 1 would be it. The pass must refuse it.
(module
  (func (export "spin") (param i32)
    (loop $l
      (local.set 1 (i64.const 0x7fffffffffffffff))
      (br $l))))
