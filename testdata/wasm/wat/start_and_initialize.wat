;; start_and_initialize: exports both _start and _initialize (a command and a
;; reactor at once, which is ambiguous). Refused at load.
(module
  (memory (export "memory") 1)

  (func $_start (export "_start"))
  (func $_initialize (export "_initialize"))
)
