;; no_memory: a reactor exporting handle but no memory. Refused at load.
(module
  (func $handle (export "handle") (result i32)
    (i32.const 0))
)
