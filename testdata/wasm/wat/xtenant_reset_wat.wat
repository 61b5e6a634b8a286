;; xtenant_reset_wat: the channels of xtenant_wat that a resettable module may use, so
;; that context-isolated instances of it are recycled: linear memory, a mutable global,
;; memory.init of a passive segment, WASI fd 1 (fd_close when the tag's last byte is odd: sets the dirty flag) and the
;; environment buffer. The table is only read.
;; Each call first reports what it sees, as "{\"m\":\"........\",\"g\":\"........\",\"t\":\"..\",\"f\":\".\",\"e\":\"................................\",\"p\":\"........\"}":
;; m = 8 bytes of memory at 0x100, g = the global's 8 bytes, t = table size digit and
;; slot 0 (n null, f set), f = 1 when fd 1 is open, e = the first 32 bytes of the
;; environment, p = the passive segment ("PASSIVE!"); unprintable bytes read '.'. Then it
;; stores the input's bytes 6..13 (the tag of {"s":"TAG....."}) in every channel.
;; A fresh instance with an empty environment answers m, g '.'x8, t "1n", f "1", p "PASSIVE!".
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_fdstat_get" (func $fd_fdstat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $environ_get (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (global $g (mut i64) (i64.const 0))
  (func $f)
  (elem declare func $f)
  (data $p "PASSIVE!")
  (data (i32.const 8192) "{\"m\":\"........\",\"g\":\"........\",\"t\":\"..\",\"f\":\".\",\"e\":\"................................\",\"p\":\"........\"}")
  (func $copy (param $dst i32) (param $src i32) (param $n i32)
    (memory.copy (local.get $dst) (local.get $src) (local.get $n)))
  (func $sanitize (param $p i32) (param $end i32)
    (local $c i32)
    (loop $s
      (local.set $c (i32.load8_u (local.get $p)))
      (if (i32.or (i32.or (i32.lt_u (local.get $c) (i32.const 32)) (i32.ge_u (local.get $c) (i32.const 127)))
                  (i32.or (i32.eq (local.get $c) (i32.const 34)) (i32.eq (local.get $c) (i32.const 92))))
        (then (i32.store8 (local.get $p) (i32.const 46))))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br_if $s (i32.lt_u (local.get $p) (local.get $end)))))
  (func $handle (export "handle") (result i32)
    (local $n i32)
    ;; observe
    (call $copy (i32.const 8198) (i32.const 256) (i32.const 8))
    (i64.store (i32.const 8213) (global.get $g))
    (i32.store8 (i32.const 8228) (i32.add (i32.const 48) (table.size $t)))
    (i32.store8 (i32.const 8229) (select (i32.const 110) (i32.const 102) (ref.is_null (table.get $t (i32.const 0)))))
    (i32.store8 (i32.const 8237) (i32.add (i32.const 48) (i32.eqz (call $fd_fdstat_get (i32.const 1) (i32.const 12288)))))
    (drop (call $environ_sizes_get (i32.const 12544) (i32.const 12548)))
    (if (i32.and (i32.gt_u (i32.load (i32.const 12544)) (i32.const 0)) (i32.le_u (i32.load (i32.const 12548)) (i32.const 4096)))
      (then (drop (call $environ_get (i32.const 12800) (i32.const 16384)))))
    (call $copy (i32.const 8245) (i32.const 16384) (i32.const 32))
    (memory.init $p (i32.const 8284) (i32.const 0) (i32.const 8))
    (call $sanitize (i32.const 8198) (i32.const 8206))
    (call $sanitize (i32.const 8213) (i32.const 8221))
    (call $sanitize (i32.const 8228) (i32.const 8230))
    (call $sanitize (i32.const 8237) (i32.const 8238))
    (call $sanitize (i32.const 8245) (i32.const 8277))
    (call $sanitize (i32.const 8284) (i32.const 8292))
    (drop (call $output_set (i32.const 8192) (i32.const 102)))
    (drop (call $input_read (i32.const 1088) (i32.const 64)))
    ;; carry the tag in every channel
    (i64.store (i32.const 256) (i64.load (i32.const 1094)))
    (global.set $g (i64.load (i32.const 1094)))
    (if (i32.and (i32.load8_u (i32.const 1101)) (i32.const 1)) (then (drop (call $fd_close (i32.const 1)))))
    (i32.const 0))
)
