# sandboxd init's templates (TestFirstHour builds each from a temp dir):
# extism-go needs go-pdk v1.1.3 (20-extism.sh downloads it), assemblyscript
# needs npm (its package-lock.json is examples/extism-as's: @extism/as-pdk
# 1.0.0, assemblyscript 0.27.37, which 20-extism.sh's npm ci caches), and c
# needs clang + wasm-ld (apt, in .ci/run). Fail early when one is missing.
for tool in go npm clang wasm-ld wat2wasm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "60-init.sh: $tool is missing (sandboxd init's templates need it)"; exit 1; }
done
