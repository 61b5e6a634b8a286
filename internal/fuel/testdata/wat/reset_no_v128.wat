;; Not resettable: a mutable v128 global cannot be saved through the host API.
(module
  (global $v (mut v128) (v128.const i64x2 0 0))
  (func (export "run") (global.set $v (v128.const i64x2 1 2))))
