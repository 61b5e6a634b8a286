;; live_random: a liveness-test hostile guest: handle loops on WASI
;; random_get over 4 MiB of its memory (host work per call, few guest
;; instructions).
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 64)
  (func (export "handle") (result i32)
    (loop $more
      (drop (call $random_get (i32.const 0) (i32.const 4194304)))
      (br $more))
    (i32.const 0)))
