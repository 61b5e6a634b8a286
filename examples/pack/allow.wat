;; allow: a guardrail check (a tool taking {"config", "trace"}) that passes
;; every trace: its output is always {"passed":true,"reason":"allowed"}.
;; The smallest check a pack index's guardrail can name (see docs/packs.md).
;; Build: wat2wasm allow.wat -o allow.wasm
(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  (data (i32.const 0) "{\"passed\":true,\"reason\":\"allowed\"}")

  (func $handle (export "handle") (result i32)
    (if (result i32) (i32.eqz (call $output_set (i32.const 0) (i32.const 34)))
      (then (i32.const 0))
      (else (i32.const 1))))
)
