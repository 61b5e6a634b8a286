;; f04_optout: F04's reproducer. It exports a global under the fuel pass's
;; reserved name "sandboxd.fuel", so the pass refuses it; the executor must
;; refuse it at load (handler-shape-invalid) unless the operator allows
;; unmetered modules, and then it runs with close-on-context-done. handle
;; counts to 3e9 (seconds of work): a budget or deadline must stop it.
(module
  (memory (export "memory") 1)
  (global (export "sandboxd.fuel") i32 (i32.const 0))
  (func $handle (export "handle") (result i32)
    (local $i i64)
    (loop $count
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $count (i64.lt_u (local.get $i) (i64.const 3000000000))))
    (i32.const 0))
)
