package artifact

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Cosign's key-based signatures ("simple signing"): a manifest whose layers
// are payloads of MediaTypeCosignPayload, each annotated with its
// signature (AnnotationCosignSignature, base64). The payload names the
// signed manifest digest. It is found, for the signed digest sha256:<hex>,
// through the OCI referrers API, the referrers tag schema (tag
// sha256-<hex>, an index of referrers, what ORAS writes on registries
// without the API), and cosign's own tag sha256-<hex>.sig.
const (
	MediaTypeCosignPayload    = "application/vnd.dev.cosign.simplesigning.v1+json"
	ArtifactTypeCosignSig     = "application/vnd.dev.cosign.artifact.sig.v1+json"
	AnnotationCosignSignature = "dev.cosignproject.cosign/signature"
	cosignSignatureType       = "cosign container image signature"
	maxSignaturePayload       = 64 << 10
	maxSignatureManifests     = 32
)

// LoadVerifyKey reads a PEM public key (PKIX "PUBLIC KEY", as `cosign
// generate-key-pair` writes cosign.pub): ECDSA, Ed25519 or RSA.
func LoadVerifyKey(path string) (crypto.PublicKey, error) {
	b, err := ReadRegular(path, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("verify key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("verify key %s: want a PEM PUBLIC KEY block (cosign.pub)", path)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("verify key %s: %w", path, err)
	}
	switch k.(type) {
	case *ecdsa.PublicKey, ed25519.PublicKey, *rsa.PublicKey:
		return k, nil
	}
	return nil, fmt.Errorf("verify key %s: unsupported key type %T", path, k)
}

func verifySig(k crypto.PublicKey, payload, sig []byte) bool {
	sum := sha256.Sum256(payload)
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		return ecdsa.VerifyASN1(k, sum[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(k, payload, sig)
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], sig) == nil
	}
	return false
}

// simpleSigning is cosign's signed payload.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

// Referrer is a manifest that refers to an artifact (a signature, an SBOM,
// an attestation), found through the referrers API, the referrers tag
// schema or cosign's .sig tag.
type Referrer struct {
	Digest       string `json:"digest"`
	MediaType    string `json:"mediaType"`
	ArtifactType string `json:"artifactType,omitempty"`
	// Via says how it was found: "referrers API", "referrers tag" or "cosign tag".
	Via string `json:"via"`
}

// referrers lists the manifests that refer to digest d.
func (o *OCI) referrers(ctx context.Context, src source, d string) ([]Referrer, error) {
	var out []Referrer
	seen := map[string]bool{}
	add := func(r Referrer) {
		if !seen[r.Digest] && checkDigest(r.Digest) == nil && len(out) < maxSignatureManifests {
			seen[r.Digest] = true
			out = append(out, r)
		}
	}
	alg, hexPart := digestParts(d)
	if rs, ok := src.(*remoteSource); ok {
		idx, err := rs.referrersAPI(ctx, d)
		if err != nil {
			return nil, err
		}
		for _, m := range idx {
			add(Referrer{Digest: m.Digest, MediaType: m.MediaType, ArtifactType: m.ArtifactType, Via: "referrers API"})
		}
	}
	// The referrers tag schema: an index tagged sha256-<hex>.
	if td, size, ok, err := o.optionalTag(ctx, src, alg+"-"+hexPart); err != nil {
		return nil, err
	} else if ok {
		raw, err := src.manifest(ctx, td, size)
		if err != nil {
			return nil, err
		}
		if doc, err := parseManifest(raw, td); err == nil && isIndex(doc.MediaType) {
			for _, m := range doc.Manifests {
				add(Referrer{Digest: m.Digest, MediaType: m.MediaType, ArtifactType: m.ArtifactType, Via: "referrers tag"})
			}
		}
	}
	// Cosign's tag: sha256-<hex>.sig, the signature manifest itself.
	if td, _, ok, err := o.optionalTag(ctx, src, alg+"-"+hexPart+".sig"); err != nil {
		return nil, err
	} else if ok {
		add(Referrer{Digest: td, MediaType: mediaTypeOCIManifest, ArtifactType: ArtifactTypeCosignSig, Via: "cosign tag"})
	}
	return out, nil
}

// optionalTag resolves tag, reporting ok=false when it does not exist.
func (o *OCI) optionalTag(ctx context.Context, src source, tag string) (string, int64, bool, error) {
	d, size, err := src.resolveTag(ctx, tag)
	if err == nil {
		return d, size, checkDigest(d) == nil, nil
	}
	var he *transport.Error
	if errors.As(err, &he) && he.StatusCode == http.StatusNotFound {
		return "", 0, false, nil
	}
	if _, layout := src.(*layoutSource); layout && errors.Is(err, toolerr.ArtifactUnavailable) {
		return "", 0, false, nil
	}
	return "", 0, false, err
}

// referrersAPI asks GET /v2/<repo>/referrers/<digest>; a registry without
// the API (404) has none to give.
func (s *remoteSource) referrersAPI(ctx context.Context, d string) ([]descriptor, error) {
	resp, err := s.do(ctx, http.MethodGet, s.url("referrers", d), mediaTypeOCIIndex, "listing the referrers of "+d)
	if err != nil {
		var he *transport.Error
		if errors.As(err, &he) && (he.StatusCode == http.StatusNotFound || he.StatusCode == http.StatusBadRequest || he.StatusCode == http.StatusMethodNotAllowed) {
			return nil, nil
		}
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxManifestSize+1))
	if err != nil || len(raw) > MaxManifestSize {
		return nil, nil
	}
	var idx manifestDoc
	if json.Unmarshal(raw, &idx) != nil {
		return nil, nil
	}
	return idx.Manifests, nil
}

// verifySignatures requires a cosign signature by one of the configured
// keys over the artifact's manifest digest (or the index it was chosen
// from). None found: artifact-refused. Found, but none verifies:
// artifact-integrity-failed.
func (o *OCI) verifySignatures(ctx context.Context, op *opened) error {
	digests := []string{op.art.Digest}
	if op.art.Index != "" {
		digests = append(digests, op.art.Index)
	}
	var tried []string
	for _, d := range digests {
		refs, err := o.referrers(ctx, op.src, d)
		if err != nil {
			return err
		}
		for _, r := range refs {
			if r.ArtifactType != "" && r.ArtifactType != ArtifactTypeCosignSig {
				continue
			}
			raw, err := op.src.manifest(ctx, r.Digest, -1)
			if err != nil {
				return err
			}
			doc, err := parseManifest(raw, r.Digest)
			if err != nil || !isImageManifest(doc.MediaType) {
				continue
			}
			for _, l := range doc.Layers {
				sigB64 := l.Annotations[AnnotationCosignSignature]
				if l.MediaType != MediaTypeCosignPayload || sigB64 == "" || checkDigest(l.Digest) != nil {
					continue
				}
				if l.Size > maxSignaturePayload {
					tried = append(tried, fmt.Sprintf("%s: payload over %d bytes", r.Digest, maxSignaturePayload))
					continue
				}
				payload, err := o.readBlob(ctx, op.src, l)
				if err != nil {
					return err
				}
				sig, err := base64.StdEncoding.DecodeString(sigB64)
				if err != nil {
					tried = append(tried, r.Digest+": the signature is not base64")
					continue
				}
				var ss simpleSigning
				if err := json.Unmarshal(payload, &ss); err != nil || ss.Critical.Type != cosignSignatureType {
					tried = append(tried, r.Digest+": not a cosign simple-signing payload")
					continue
				}
				if ss.Critical.Image.DockerManifestDigest != d {
					tried = append(tried, fmt.Sprintf("%s: signs %s, not %s", r.Digest, ss.Critical.Image.DockerManifestDigest, d))
					continue
				}
				for _, k := range o.cfg.verifyKeys {
					if verifySig(k, payload, sig) {
						o.logInfo("artifact-verified", "digest", d, "signature", r.Digest)
						return nil
					}
				}
				tried = append(tried, r.Digest+": the signature does not verify with the given key(s)")
			}
		}
	}
	if len(tried) == 0 {
		return toolerr.New(toolerr.ArtifactRefused, "%s (%s) is not signed: a verify key is configured and no cosign signature was found (referrers API, sha256-<hex> referrers tag, sha256-<hex>.sig tag)", op.ref, op.art.Digest)
	}
	return toolerr.New(toolerr.ArtifactIntegrityFailed, "%s (%s): no signature verifies with the given key(s): %s", op.ref, op.art.Digest, strings.Join(tried, "; "))
}
