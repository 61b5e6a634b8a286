;; logger: a reactor that logs one line at each level, 0 debug to 3 error,
;; then outputs {}.
(module
  (import "sandboxd_v1" "log" (func $log (param $level i32) (param $ptr i32) (param $len i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  (data (i32.const 0) "{}")
  (data (i32.const 16) "debug line")  ;; 10 bytes
  (data (i32.const 32) "info line")   ;; 9 bytes
  (data (i32.const 48) "warn line")   ;; 9 bytes
  (data (i32.const 64) "error line")  ;; 10 bytes

  (func $handle (export "handle") (result i32)
    (call $log (i32.const 0) (i32.const 16) (i32.const 10))
    (call $log (i32.const 1) (i32.const 32) (i32.const 9))
    (call $log (i32.const 2) (i32.const 48) (i32.const 9))
    (call $log (i32.const 3) (i32.const 64) (i32.const 10))
    (if (result i32) (i32.eqz (call $output_set (i32.const 0) (i32.const 2)))
      (then (i32.const 0))
      (else (i32.const 1))))
)
