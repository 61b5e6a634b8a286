;; cache_spinner: what an attacker who can write the fuel cache directory would put
;; there in place of an instrumented module: it exports the fuel pass's counter and floor
;; globals (so it looks metered) but contains no checks, and spins for a few seconds of
;; CPU before answering null. It is never loaded as a tool (the pass refuses the
;; reserved names): executor tests copy it over a cache entry and expect the entry to be
;; rejected and the real module re-instrumented.
(module
  (memory (export "memory") 1)
  (global (export "sandboxd.fuel") (mut i64) (i64.const 0))
  (global (export "sandboxd.fuel.limit") (mut i64) (i64.const 0))
  (func $handle (export "handle") (result i32)
    (local $i i64)
    (loop $spin
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $spin (i64.lt_u (local.get $i) (i64.const 4000000000))))
    (i32.const 0))
)
