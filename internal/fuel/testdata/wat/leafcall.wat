;; leafcall: a loop that calls a leaf (a function with no loop and no call,
;; metered by a charge of the counter itself since pass version 11) once per
;; iteration: run(n) returns the checksum of n iterations of step, the
;; function the Go loop corpus's "calls a func" shape calls.
;; BenchmarkLeafCall runs it plain and in both forms of the pass.
(module
  (func $step (param $s i64) (param $i i64) (result i64)
    local.get $s
    local.get $i
    local.get $i
    i64.mul
    i64.add
    local.get $s
    i64.const 7
    i64.shr_s
    i64.xor)
  (func (export "run") (param $n i64) (result i64)
    (local $i i64) (local $s i64)
    (block $done
      (loop $l
        local.get $i
        local.get $n
        i64.ge_s
        br_if $done
        local.get $s
        local.get $i
        call $step
        local.set $s
        local.get $i
        i64.const 1
        i64.add
        local.set $i
        br $l))
    local.get $s))
