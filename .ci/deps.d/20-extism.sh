# Extism (executor's Extism ABI tests, bench/): the go-sdk module's test
# plug-ins (its wasm/ folder) are read from the module cache at test time,
# and the Go PDK example (examples/extism-go) builds against go-pdk.
# Both come from the Go module proxy, pinned.
go mod download github.com/extism/go-sdk@v1.7.1
(cd examples/extism-go && go mod download github.com/extism/go-pdk@v1.1.3)
# The AssemblyScript PDK example (examples/extism-as): npm @extism/as-pdk
# 1.0.0 and assemblyscript 0.27.37, pinned by its package-lock.json.
(cd examples/extism-as && npm ci --no-audit --no-fund)
