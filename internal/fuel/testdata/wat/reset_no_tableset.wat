;; Not resettable: table.set changes a table.
(module
  (table $t 1 funcref)
  (func $f)
  (func (export "run") (table.set $t (i32.const 0) (ref.func $f)))
  (elem declare func $f))
