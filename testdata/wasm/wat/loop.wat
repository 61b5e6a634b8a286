;; loop: a reactor whose handle spins forever without calling the host.
;; Only the CPU budget (cpuMs) or the wall deadline can stop it.
(module
  (memory (export "memory") 1)

  (func $handle (export "handle") (result i32)
    (loop $forever
      (br $forever))
    (i32.const 0))
)
