;; lat_input_read: handle loops on input_read into an 8 MiB buffer (give it
;; an input of a MiB or more). Interrupt-latency tests.
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (memory (export "memory") 128)
  (func $handle (export "handle") (result i32)
    (loop $more
      (drop (call $input_read (i32.const 0) (i32.const 8388608)))
      (br $more))
    (i32.const 0))
)
