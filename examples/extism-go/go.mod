module github.com/sandboxd/sandboxd/examples/extism-go

go 1.24

require github.com/extism/go-pdk v1.1.3
