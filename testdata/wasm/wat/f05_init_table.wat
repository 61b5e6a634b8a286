;; f05_init_table (a variant of red-team finding F05): _initialize grows a table by
;; 1 Mi elements (8 MiB of host memory), handle then grows linear memory by 128 pages
;; (8 MiB). Tables share memMB with linear memory, and a table grown during
;; initialisation stays charged for every call the instance serves.
;; handle returns 1 when the table growth was refused, 2 when the memory growth was
;; refused, 0 when both fit: under memMB 16 the memory growth must be refused
;; (limits-exceeded memMB); under memMB 32 both fit (result null).
(module
  (memory (export "memory") 1)
  (table $t 0 funcref)
  (global $grown (mut i32) (i32.const 0))
  (func $init (export "_initialize")
    (global.set $grown (i32.ne (table.grow $t (ref.null func) (i32.const 1048576)) (i32.const -1))))
  (func $handle (export "handle") (result i32)
    (if (i32.eqz (global.get $grown)) (then (return (i32.const 1))))
    (if (result i32) (i32.eq (memory.grow (i32.const 128)) (i32.const -1))
      (then (i32.const 2))
      (else (i32.const 0))))
)
