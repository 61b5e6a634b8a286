;; count.wat: "count" runs its loop n times and returns n. Its fuel cost is
;; exact: the function level costs 1 (local.get after the loop) and the loop
;; level 10 (the instructions counted on the right), so a call with n >= 1
;; costs 1 + 10n. "spin" never returns: each iteration costs 1 (br).
(module
  (func (export "count") (param $n i32) (result i32) (local $k i32)
    (loop $l
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))  ;; 4
      (local.set $k (i32.add (local.get $k) (i32.const 1)))  ;; 4
      (br_if $l (local.get $n)))                              ;; 2
    (local.get $k))                                          ;; function level: 1
  (func (export "spin") (loop $l (br $l))))
