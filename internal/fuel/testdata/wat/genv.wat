;; genv.wat provides the global features.wat imports.
(module (global (export "base") i32 (i32.const 42)))
