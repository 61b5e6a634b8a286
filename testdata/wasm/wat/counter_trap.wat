;; counter_trap: counter.wat, except that after incrementing it traps
;; (unreachable) when the input is longer than 2 bytes (anything but {}).
;; Under posture none, the call after a trap must answer {"count":1}: an
;; instance that trapped is discarded, never reused.
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  (global $count (mut i32) (i32.const 0))

  ;; the output is built at 0: {"count": then the digits, then }
  (data (i32.const 0) "{\"count\":")
  (global $prefix_len i32 (i32.const 9))

  ;; $utoa writes the decimal digits of $n at $at and returns how many.
  (func $utoa (param $n i32) (param $at i32) (result i32)
    (local $len i32)
    (local $i i32)
    (local $tmp i32)
    ;; count the digits
    (local.set $tmp (local.get $n))
    (loop $count_digits
      (local.set $len (i32.add (local.get $len) (i32.const 1)))
      (local.set $tmp (i32.div_u (local.get $tmp) (i32.const 10)))
      (br_if $count_digits (local.get $tmp)))
    ;; write them from the last one back
    (local.set $i (local.get $len))
    (loop $write_digits
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (i32.store8
        (i32.add (local.get $at) (local.get $i))
        (i32.add (i32.const 0x30) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $write_digits (local.get $i)))
    (local.get $len))

  (func $handle (export "handle") (result i32)
    (local $end i32)
    (global.set $count (i32.add (global.get $count) (i32.const 1)))
    (if (i32.gt_s (call $input_read (i32.const 0) (i32.const 0)) (i32.const 2))
      (then (unreachable)))
    (local.set $end
      (i32.add (global.get $prefix_len)
        (call $utoa (global.get $count) (global.get $prefix_len))))
    (i32.store8 (local.get $end) (i32.const 0x7d)) ;; }
    (if (result i32)
      (i32.eqz (call $output_set (i32.const 0) (i32.add (local.get $end) (i32.const 1))))
      (then (i32.const 0))
      (else (i32.const 1))))
)
