;; live_hostcall: a liveness-test hostile guest: handle loops on a cheap
;; host call (input_read of 16 bytes) as fast as it can, so the call spends
;; its time crossing the host boundary.
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "handle") (result i32)
    (loop $more
      (drop (call $input_read (i32.const 0) (i32.const 16)))
      (br $more))
    (i32.const 0)))
