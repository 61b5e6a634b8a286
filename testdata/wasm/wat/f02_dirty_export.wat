;; f02_dirty_export (red-team finding F02): not resettable per the fuel pass (it uses
;; table.set), yet it exports its own mutable global as "sandboxd.dirty", the name the pass
;; reserves for the dirty flag of a module it made resettable. Recycling must follow the pass's
;; verdict, not this export: every call must answer {"calls":0,"prev":"........"}.
(module
  (import "sandboxd_v1" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table 1 funcref)
  (global $fake_dirty (export "sandboxd.dirty") (mut i32) (i32.const 0))
  (global $prev (mut i64) (i64.const 0x2e2e2e2e2e2e2e2e))  ;; "........"
  (global $calls (mut i32) (i32.const 0))
  (func $f)
  (elem declare func $f)
  (data (i32.const 200) "{\"calls\":0,\"prev\":\"........\"}")   ;; 29 bytes; digit at 209, prev at 219..226
  (func (export "handle") (result i32)
    (local $p i32) (local $c i32)
    (i32.store8 (i32.const 209) (i32.add (i32.const 48) (global.get $calls)))
    (i64.store (i32.const 219) (global.get $prev))
    (local.set $p (i32.const 219))
    (loop $s
      (local.set $c (i32.load8_u (local.get $p)))
      (if (i32.or (i32.or (i32.lt_u (local.get $c) (i32.const 32)) (i32.ge_u (local.get $c) (i32.const 127)))
                  (i32.or (i32.eq (local.get $c) (i32.const 34)) (i32.eq (local.get $c) (i32.const 92))))
        (then (i32.store8 (local.get $p) (i32.const 95))))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br_if $s (i32.lt_u (local.get $p) (i32.const 227))))
    (drop (call $output_set (i32.const 200) (i32.const 29)))
    ;; remember this caller's input (bytes 6..13 skip the {"pw":" prefix)
    (drop (call $input_read (i32.const 0) (i32.const 64)))
    (global.set $prev (i64.load (i32.const 7)))
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (table.set 0 (i32.const 0) (ref.func $f))   ;; makes the module non-resettable
    (i32.const 0)))
