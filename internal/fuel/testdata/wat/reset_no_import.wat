;; Not resettable: an import whose host state is unknown.
(module
  (import "env" "tick" (func $tick))
  (func (export "run") (call $tick)))
