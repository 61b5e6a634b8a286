;; Invalid on purpose (built with wat2wasm --no-check): the loop writes
;; global 0, which does not exist — but after the pass adds its globals,
;; index 0 would be the fuel counter, and the guest could refill itself
;; forever. The pass must refuse it.
(module
  (func (export "spin")
    (loop $l
      (global.set 0 (i64.const 0x7fffffffffffffff))
      (br $l))))
