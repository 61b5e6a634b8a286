# make lint (run by .ci/run) requires staticcheck: pinned, into $SANDBOXD_TOOLS/bin.
lint_staticcheck_version=v0.8.2
lint_bin="${SANDBOXD_TOOLS:-$PWD/.tools}/bin"
mkdir -p "$lint_bin"
if [[ "$("$lint_bin/staticcheck" -version 2>/dev/null || true)" != *"(${lint_staticcheck_version#v})" ]]; then
  GOBIN="$lint_bin" go install "honnef.co/go/tools/cmd/staticcheck@$lint_staticcheck_version"
fi
echo "$("$lint_bin/staticcheck" -version)"
