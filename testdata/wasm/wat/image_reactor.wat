;; image_reactor: proves that an instance loaded from its tool's instance
;; image (executor/image.go) is in exactly the state _initialize left, for a
;; memory large enough to be mapped copy-on-write (640 KiB > 256 KiB).
;; _initialize counts itself ($inits), sets $g to 7, draws 8 random bytes
;; into memory at 0, grows memory by 2 pages (10 in all) and stamps page p
;; (1..9) at p*65536 with p+100. A call checks all of that and that the
;; call counter at 1024 is 0, then changes every stamp, the counter, $g and
;; $inits, and answers {"ok":N,"pages":N,"fd1":N,"rand":"<16 hex digits>"}:
;; ok is 1 when every check held, pages is memory.size before the call's own
;; growth, fd1 is 1 when fd 1 is open, rand the bytes drawn in _initialize.
;; The input's size picks what else the call does:
;;   7 bytes (e.g. {"a":1}):   trap (unreachable) after changing its state
;;   8 bytes (e.g. {"aa":1}):  grow memory by a page
;;   9 bytes (e.g. {"aaa":1}): close fd 1 (fd_close: host state) after answering
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_fdstat_get" (func $fd_fdstat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))

  (memory (export "memory") 8)
  (global $g (mut i32) (i32.const 0))
  (global $inits (mut i32) (i32.const 0))
  (data (i32.const 1024) "\00\00\00\00")
  (data (i32.const 2048) "{\"ok\":0,\"pages\":00,\"fd1\":0,\"rand\":\"0000000000000000\"}")

  (func $digit (param $at i32) (param $v i32)
    (i32.store8 (local.get $at) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10)))))

  (func $hex (param $v i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $v) (i32.const 10))
      (then (i32.add (i32.const 48) (local.get $v)))
      (else (i32.add (i32.const 87) (local.get $v)))))

  (func $initialize (export "_initialize")
    (local $p i32)
    (global.set $inits (i32.add (global.get $inits) (i32.const 1)))
    (global.set $g (i32.const 7))
    (drop (call $random_get (i32.const 0) (i32.const 8)))
    (drop (memory.grow (i32.const 2)))
    (local.set $p (i32.const 1))
    (loop $stamp
      (i32.store (i32.mul (local.get $p) (i32.const 65536)) (i32.add (local.get $p) (i32.const 100)))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br_if $stamp (i32.lt_u (local.get $p) (i32.const 10)))))

  (func $handle (export "handle") (result i32)
    (local $size i32) (local $ok i32) (local $p i32) (local $pages i32) (local $i i32) (local $b i32)
    (local.set $size (call $input_read (i32.const 0) (i32.const 0)))
    (local.set $pages (memory.size))
    (local.set $ok (i32.and (i32.eq (global.get $g) (i32.const 7)) (i32.eq (global.get $inits) (i32.const 1))))
    (local.set $ok (i32.and (local.get $ok) (i32.eqz (i32.load (i32.const 1024)))))
    (local.set $ok (i32.and (local.get $ok) (i32.eq (local.get $pages) (i32.const 10))))
    (local.set $p (i32.const 1))
    (loop $check
      (local.set $ok (i32.and (local.get $ok)
        (i32.eq (i32.load (i32.mul (local.get $p) (i32.const 65536))) (i32.add (local.get $p) (i32.const 100)))))
      (i32.store (i32.mul (local.get $p) (i32.const 65536)) (i32.add (local.get $p) (i32.const 200)))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br_if $check (i32.lt_u (local.get $p) (i32.const 10))))
    (if (i32.eq (local.get $size) (i32.const 8))
      (then (drop (memory.grow (i32.const 1)))))
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (global.set $inits (i32.add (global.get $inits) (i32.const 1)))
    (i32.store (i32.const 1024) (i32.add (i32.load (i32.const 1024)) (i32.const 1)))
    (call $digit (i32.const 2054) (local.get $ok))
    (call $digit (i32.const 2064) (i32.div_u (local.get $pages) (i32.const 10)))
    (call $digit (i32.const 2065) (local.get $pages))
    (call $digit (i32.const 2073) (i32.eqz (call $fd_fdstat_get (i32.const 1) (i32.const 4096))))
    (local.set $i (i32.const 0))
    (loop $rand
      (local.set $b (i32.load8_u (local.get $i)))
      (i32.store8 (i32.add (i32.const 2083) (i32.mul (local.get $i) (i32.const 2))) (call $hex (i32.shr_u (local.get $b) (i32.const 4))))
      (i32.store8 (i32.add (i32.const 2084) (i32.mul (local.get $i) (i32.const 2))) (call $hex (i32.and (local.get $b) (i32.const 15))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $rand (i32.lt_u (local.get $i) (i32.const 8))))
    (if (i32.eq (local.get $size) (i32.const 7))
      (then unreachable))
    (if (i32.eq (local.get $size) (i32.const 9))
      (then (drop (call $fd_close (i32.const 1)))))
    (if (result i32) (i32.eqz (call $output_set (i32.const 2048) (i32.const 53)))
      (then (i32.const 0))
      (else (i32.const 1))))
)
