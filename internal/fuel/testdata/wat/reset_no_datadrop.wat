;; Not resettable: data.drop changes a segment.
(module
  (memory 1)
  (data $d "abc")
  (func (export "run") (data.drop $d)))
