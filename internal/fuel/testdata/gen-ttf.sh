#!/bin/sh
# gen-ttf.sh regenerates the differential-test corpus in ttf/: random valid
# modules made by binaryen's translate-to-fuzz mode (Debian package
# binaryen; built with wasm-opt version 108) from deterministic
# pseudo-random inputs, keeping only those wazero compiles with
# CoreFeaturesV2 (filter.go). Even-numbered inputs enable reference types
# too; binaryen then often emits typed function references, which wazero
# refuses, so fewer of them survive.
#
#   cd internal/fuel/testdata && ./gen-ttf.sh [count] [seed]
set -eu
count=${1:-400}
seed=${2:-sandboxd-fuel-1}
base="--enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int --enable-simd --enable-multivalue"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -f ttf/*.wasm
i=0
while [ "$i" -lt "$count" ]; do
	name=$(printf '%04d' "$i")
	# 1-8 KiB of SHA-256 counter-mode bytes: the same corpus on every machine
	python3 - "$seed" "$i" >"$tmp/in.bin" <<'PY'
import hashlib, sys
seed, i = sys.argv[1], int(sys.argv[2])
size = 1024 + (int(hashlib.sha256(f"{seed}/{i}/size".encode()).hexdigest(), 16) % 7168)
out, n = b"", 0
while len(out) < size:
    out += hashlib.sha256(f"{seed}/{i}/{n}".encode()).digest()
    n += 1
sys.stdout.buffer.write(out[:size])
PY
	features=$base
	if [ $((i % 2)) -eq 0 ]; then
		features="$base --enable-reference-types"
	fi
	# shellcheck disable=SC2086
	wasm-opt -ttf "$tmp/in.bin" $features -o "ttf/$name.wasm" 2>/dev/null
	i=$((i + 1))
done
go run filter.go ttf/*.wasm
ls ttf/*.wasm | wc -l
du -sh ttf
