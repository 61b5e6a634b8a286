;; init_loop.wat — reactor whose _initialize never returns. sandboxd runs
;; _initialize under the tool's cpuMs budget: limits-exceeded, cpuMs.
(module
  (memory (export "memory") 1)
  (func (export "_initialize")
    (loop $spin (br $spin)))
  (func (export "handle") (result i32)
    (i32.const 0)))
