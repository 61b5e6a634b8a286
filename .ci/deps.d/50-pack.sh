# Pack tests (deployenv/): Node's crypto signs a deploy envelope the way
# `kindgi build` does, and sandboxd must verify it. Debian's nodejs.
if ! command -v node >/dev/null 2>&1; then
  apt-get install -y --no-install-recommends nodejs
fi
echo "node $(node --version)"
