;; table_bomb.wat — reactor that grows its (max-less) table by 1M elements at a
;; time until table.grow fails, then returns how many grows succeeded.
;; sandboxd caps every table at memMB/8 elements, so with memMB 64 (8 Mi
;; elements) exactly 7 grows succeed: handler-error, details.returned = 7.
;; Without the cap, each grow allocates 8 MiB of host memory, up to 32 GiB.
(module
  (memory (export "memory") 1)
  (table 1 funcref)
  (func (export "handle") (result i32)
    (local $n i32)
    (block $done
      (loop $grow
        (br_if $done
          (i32.eq (table.grow 0 (ref.null func) (i32.const 1048576)) (i32.const -1)))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $grow)))
    (local.get $n)))
