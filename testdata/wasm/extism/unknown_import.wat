;; Imports a name extism:host/env does not define: refused at load.
(module
  (import "extism:host/env" "bogus" (func (param i64) (result i64)))
  (func (export "run") (result i32) (i32.const 0)))
