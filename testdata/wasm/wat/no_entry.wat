;; no_entry: exports memory only: neither _start nor handle.
(module
  (memory (export "memory") 1)
)
