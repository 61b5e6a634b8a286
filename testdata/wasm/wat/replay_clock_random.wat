;; replay_clock_random: a reactor for record and replay (docs/replay.md). It
;; reads the realtime clock (WASI clock_time_get) and random bytes
;; (random_get) and outputs both in hex: {"t":"<8 bytes>","r":"<8 bytes>"}.
;; It asks for 8 random bytes when the input is at most 2 bytes long ({}),
;; else for 4, so a replay under another input diverges at the random_get.
(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  ;; 0..8 the clock reading, 8..16 the random bytes, 32 the hex digits,
  ;; 64 the output template (the hex goes at 70 and 93; 47 bytes).
  (data (i32.const 32) "0123456789abcdef")
  (data (i32.const 64) "{\"t\":\"................\",\"r\":\"................\"}")

  ;; $hex writes n bytes at src as 2n hex digits at dst.
  (func $hex (param $src i32) (param $dst i32) (param $n i32)
    (local $i i32)
    (local $b i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $b (i32.load8_u (i32.add (local.get $src) (local.get $i))))
        (i32.store8 (i32.add (local.get $dst) (i32.shl (local.get $i) (i32.const 1)))
          (i32.load8_u (i32.add (i32.const 32) (i32.shr_u (local.get $b) (i32.const 4)))))
        (i32.store8 (i32.add (i32.add (local.get $dst) (i32.shl (local.get $i) (i32.const 1))) (i32.const 1))
          (i32.load8_u (i32.add (i32.const 32) (i32.and (local.get $b) (i32.const 15)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))

  (func $handle (export "handle") (result i32)
    (local $n i32)
    (local.set $n (i32.const 8))
    (if (i32.gt_s (call $input_read (i32.const 0) (i32.const 0)) (i32.const 2))
      (then (local.set $n (i32.const 4))))
    (drop (call $clock_time_get (i32.const 0) (i64.const 1) (i32.const 0)))
    (drop (call $random_get (i32.const 8) (local.get $n)))
    (call $hex (i32.const 0) (i32.const 70) (i32.const 8))
    (call $hex (i32.const 8) (i32.const 93) (i32.const 8))
    (drop (call $output_set (i32.const 64) (i32.const 47)))
    (i32.const 0)))
