# OCI interop tests (artifact/, cmd/sandboxd/oci_test.go) build artifacts with
# the real clients: ORAS and crane, pinned, into $SANDBOXD_TOOLS/bin.
# docker-registry itself is installed by .ci/run.
oci_oras_version=1.3.6
oci_crane_version=v0.22.1
oci_bin="${SANDBOXD_TOOLS:-$PWD/.tools}/bin"
mkdir -p "$oci_bin"
oci_have="$("$oci_bin/oras" version 2>/dev/null || true)"
if [[ "$oci_have" != *"Version: "*" $oci_oras_version"$'\n'* ]]; then
  GOBIN="$oci_bin" go install "oras.land/oras/cmd/oras@v$oci_oras_version"
fi
if [ "$("$oci_bin/crane" version 2>/dev/null || true)" != "$oci_crane_version" ]; then
  GOBIN="$oci_bin" go install "github.com/google/go-containerregistry/cmd/crane@$oci_crane_version"
fi
echo "oras $("$oci_bin/oras" version | sed -n 's/^Version: *//p'), crane $("$oci_bin/crane" version)"
