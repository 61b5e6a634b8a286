package artifact

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"net"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/sandboxd/sandboxd/toolerr"
)

// LayoutPrefix starts an imageRef that names an OCI image layout directory:
// "oci-layout:<dir>", "oci-layout:<dir>:<tag>" or "oci-layout:<dir>@sha256:<hex>".
// See https://github.com/opencontainers/image-spec/blob/main/image-layout.md.
const LayoutPrefix = "oci-layout:"

// imageRef is a parsed imageRef: either a registry reference or a layout
// directory, plus the tag or digest that names the manifest.
type imageRef struct {
	raw    string
	layout string          // layout directory; "" for registry refs
	repo   name.Repository // registry refs only
	tag    string          // "" when pinned by digest only
	digest string          // "sha256:<hex>" when pinned
}

// pinned reports whether the manifest is named by digest.
func (r *imageRef) pinned() bool { return r.digest != "" }

// canonical is the digest-pinned form of the reference for digest d.
func (r *imageRef) canonical(d string) string {
	if r.layout != "" {
		return LayoutPrefix + r.layout + "@" + d
	}
	return r.repo.Name() + "@" + d
}

// String names the reference as the user wrote it.
func (r *imageRef) String() string { return r.raw }

// DigestPinned reports whether imageRef names its manifest by digest
// ("registry/repo@sha256:…", "registry/repo:tag@sha256:…",
// "oci-layout:dir@sha256:…"). The strict posture requires it.
func DigestPinned(imageRef string) bool {
	r, err := parseImageRef(imageRef, nil)
	return err == nil && r.pinned()
}

// parseImageRef parses an imageRef. insecure reports whether a registry
// host:port may be reached over plain HTTP.
func parseImageRef(s string, insecure map[string]bool) (*imageRef, error) {
	if s == "" {
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "empty imageRef")
	}
	if strings.ContainsAny(s, "\x00\n\r") {
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "imageRef %q contains control characters", s)
	}
	if rest, ok := strings.CutPrefix(s, LayoutPrefix); ok {
		return parseLayoutRef(s, rest)
	}
	ref, err := name.ParseReference(s)
	if err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, fmt.Sprintf("invalid imageRef %q", s))
	}
	if insecure[ref.Context().RegistryStr()] {
		if ref, err = name.ParseReference(s, name.Insecure); err != nil {
			return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, fmt.Sprintf("invalid imageRef %q", s))
		}
	}
	r := &imageRef{raw: s, repo: ref.Context()}
	switch v := ref.(type) {
	case name.Digest:
		if err := checkDigest(v.DigestStr()); err != nil {
			return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, fmt.Sprintf("invalid imageRef %q", s))
		}
		// In "repo:tag@digest" the digest decides; the tag is ignored.
		r.digest = v.DigestStr()
	case name.Tag:
		r.tag = v.TagStr()
	}
	return r, nil
}

func parseLayoutRef(raw, rest string) (*imageRef, error) {
	r := &imageRef{raw: raw}
	if dir, d, ok := strings.Cut(rest, "@"); ok {
		if err := checkDigest(d); err != nil {
			return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, fmt.Sprintf("invalid imageRef %q", raw))
		}
		rest, r.digest = dir, d
	}
	if i := strings.LastIndex(rest, ":"); i >= 0 && i > strings.LastIndex(rest, "/") {
		rest, r.tag = rest[:i], rest[i+1:]
		if r.tag == "" {
			return nil, toolerr.New(toolerr.ArtifactUnavailable, "invalid imageRef %q: empty tag", raw)
		}
	}
	if rest == "" {
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "invalid imageRef %q: no layout directory", raw)
	}
	r.layout = rest
	return r, nil
}

// checkTag refuses t unless it is a tag of repo's ("repo:t" parses, and t
// holds no '@', ':' or '/').
func checkTag(repo name.Repository, t string) error {
	if _, err := name.NewTag(repo.Name()+":"+t, name.WeakValidation); err != nil || strings.ContainsAny(t, "@:/") {
		return toolerr.New(toolerr.ArtifactRefused, "invalid tag %q", t)
	}
	return nil
}

// checkDigest accepts only "sha256:" followed by 64 lowercase hex digits,
// or "sha512:" and 128. Digests name files in the cache and in layout
// directories, so nothing else may pass.
func checkDigest(d string) error {
	alg, hexPart, _ := strings.Cut(d, ":")
	want := map[string]int{"sha256": 64, "sha512": 128}[alg]
	if want == 0 {
		return fmt.Errorf("digest %q: only sha256 and sha512 digests are supported", d)
	}
	if len(hexPart) != want {
		return fmt.Errorf("digest %q: want %d hex digits", d, want)
	}
	for _, c := range hexPart {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("digest %q: not lowercase hex", d)
		}
	}
	return nil
}

// digestParts splits a checked digest into its algorithm and hex.
func digestParts(d string) (alg, hexPart string) {
	alg, hexPart, _ = strings.Cut(d, ":")
	return alg, hexPart
}

// digestHash returns a new hash for digest d's algorithm.
func digestHash(d string) hash.Hash {
	if alg, _ := digestParts(d); alg == "sha512" {
		return sha512.New()
	}
	return sha256.New()
}

// digestWith is the digest of b in the algorithm of digest d.
func digestWith(d string, b []byte) string {
	h := digestHash(d)
	h.Write(b)
	alg, _ := digestParts(d)
	return alg + ":" + hex.EncodeToString(h.Sum(nil))
}

// digestAlgs are the algorithms digests may use, each a directory of
// blobs in the cache and in layouts.
var digestAlgs = []string{"sha256", "sha512"}

// checkInsecureHost validates an --insecure-registry value: host:port (or a
// bare host) whose host is loopback. Plain HTTP is never allowed elsewhere.
func checkInsecureHost(h string) error {
	host := h
	if hh, _, err := net.SplitHostPort(h); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("insecure registry %q: plain HTTP is only allowed to loopback registries (localhost, 127.0.0.0/8, ::1)", h)
	}
	return nil
}

// AnchorLayout makes the directory of a relative "oci-layout:" imageRef
// relative to baseDir (the directory of the manifest that names it), as
// relative filesystem modulePaths are. Other imageRefs are returned as is.
func AnchorLayout(imageRef, baseDir string) string {
	rest, ok := strings.CutPrefix(imageRef, LayoutPrefix)
	if !ok || baseDir == "" || rest == "" || filepath.IsAbs(rest) {
		return imageRef
	}
	return LayoutPrefix + filepath.Join(baseDir, rest)
}
