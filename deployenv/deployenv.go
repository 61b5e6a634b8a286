package deployenv

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/artifact"
)

// Schema is the $schema of a v1 deploy envelope.
const Schema = "kindgi-deploy-envelope/v1"

// Code is a Kindgi deployment error code. A Code is an error, so callers
// branch with errors.Is(err, deployenv.SignatureInvalid).
type Code string

func (c Code) Error() string { return string(c) }

// The codes Verify fails with: Kindgi's (its deployments route).
const (
	// BadInput: the envelope is not a v1 envelope (a field missing, an
	// imageRef not pinned by digest, a public key that is not Ed25519).
	BadInput Code = "bad-input"
	// SignatureInvalid: unsigned, not base64, or not the signer's Ed25519
	// signature of the canonical body.
	SignatureInvalid Code = "signature-invalid"
	// SignerNotTrusted: the signer's key id and public key are not a pair
	// of the trusted keys.
	SignerNotTrusted Code = "signer-not-trusted"
	// ImageUnverifiable: the served image's digest is not imageDigest, the
	// index's sha256 is not indexHash, or the index is another
	// artifactVersion.
	ImageUnverifiable Code = "image-unverifiable"
)

// Error is a refusal: its Code and a message saying what differed.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// ErrorCode returns e's Code as a string (package pack's Coder).
func (e *Error) ErrorCode() string { return string(e.Code) }

// Is matches e's Code.
func (e *Error) Is(target error) bool { c, ok := target.(Code); return ok && c == e.Code }

func fail(c Code, format string, args ...any) error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// Envelope is a kindgi-deploy-envelope/v1 document.
type Envelope struct {
	Schema          string          `json:"$schema"`
	ImageRef        string          `json:"imageRef"`
	ImageDigest     string          `json:"imageDigest"`
	ArtifactVersion string          `json:"artifactVersion"`
	Index           json.RawMessage `json:"index"`
	IndexHash       string          `json:"indexHash"`
	TenantID        string          `json:"tenantId"`
	PublishedAt     string          `json:"publishedAt"`
	SignerKeyID     string          `json:"signerKeyId,omitempty"`
	SignerPublicKey string          `json:"signerPublicKey,omitempty"`
	Signature       string          `json:"signature,omitempty"`
	BuildLogsURL    string          `json:"buildLogsUrl,omitempty"`
}

// MaxFileBytes caps an envelope or trusted-keys file.
const MaxFileBytes = 32 << 20

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Parse decodes an envelope and checks its shape (unknown fields refused,
// as Kindgi's wire parser does; bad-input otherwise).
func Parse(data []byte) (*Envelope, error) {
	var env Envelope
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fail(BadInput, "not a deploy envelope: %v", err)
	}
	switch {
	case env.Schema != Schema:
		return nil, fail(BadInput, "$schema is %q, want %q", env.Schema, Schema)
	case env.ImageRef == "" || env.ArtifactVersion == "" || env.IndexHash == "" || env.TenantID == "" || env.PublishedAt == "":
		return nil, fail(BadInput, "imageRef, imageDigest, artifactVersion, indexHash, tenantId and publishedAt are all required")
	case !digestRe.MatchString(env.ImageDigest):
		return nil, fail(BadInput, "imageDigest %q is not sha256:<64 hex>", env.ImageDigest)
	case !digestRe.MatchString(normalizeHash(env.IndexHash)):
		return nil, fail(BadInput, "indexHash %q is not sha256:<64 hex>", env.IndexHash)
	}
	return &env, nil
}

// ReadFile reads and parses an envelope file.
func ReadFile(path string) (*Envelope, error) {
	b, err := readCapped(path)
	if err != nil {
		return nil, fail(BadInput, "%v", err)
	}
	return Parse(b)
}

// SignedBody returns the bytes the signature covers: the sorted-key,
// whitespace-free JSON of {artifactVersion, imageDigest, indexHash,
// publishedAt, tenantId}, strings escaped as JavaScript's JSON.stringify
// escapes them (so "<" stays "<", unlike encoding/json).
func SignedBody(artifactVersion, imageDigest, indexHash, publishedAt, tenantID string) []byte {
	var b bytes.Buffer
	for i, kv := range [][2]string{{"artifactVersion", artifactVersion}, {"imageDigest", imageDigest},
		{"indexHash", indexHash}, {"publishedAt", publishedAt}, {"tenantId", tenantID}} {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		jsString(&b, kv[0])
		b.WriteByte(':')
		jsString(&b, kv[1])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// jsString writes s as JSON.stringify does: ", \ and control characters
// escaped (\b \f \n \r \t, else \u00xx), everything else as is.
func jsString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else if r == utf8.RuneError {
				b.WriteString(`\ufffd`)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// TrustedKey is one key a deployment trusts: its id and Ed25519 public key.
type TrustedKey struct {
	KeyID     string
	PublicKey ed25519.PublicKey
}

// ReadTrustedKeys reads a trusted-keys file: JSON
// {"keys":[{"keyId": "...", "publicKey": "..."}]}, each publicKey a PEM
// SPKI Ed25519 key (what kindgi puts in signerPublicKey) or the base64 of
// the raw 32-byte key (Kindgi's trust list form).
func ReadTrustedKeys(path string) ([]TrustedKey, error) {
	b, err := readCapped(path)
	if err != nil {
		return nil, err
	}
	return ParseTrustedKeys(b)
}

// ParseTrustedKeys decodes a trusted-keys document (see ReadTrustedKeys).
func ParseTrustedKeys(data []byte) ([]TrustedKey, error) {
	var doc struct {
		Keys []struct {
			KeyID     string `json:"keyId"`
			PublicKey string `json:"publicKey"`
		} `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("trusted keys: want {\"keys\":[{\"keyId\",\"publicKey\"}]}: %v", err)
	}
	if len(doc.Keys) == 0 {
		return nil, errors.New("trusted keys: no keys")
	}
	out := make([]TrustedKey, 0, len(doc.Keys))
	for i, k := range doc.Keys {
		if k.KeyID == "" {
			return nil, fmt.Errorf("trusted keys: keys[%d] has no keyId", i)
		}
		pub, err := ParsePublicKey(k.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("trusted keys: %s: %v", k.KeyID, err)
		}
		out = append(out, TrustedKey{KeyID: k.KeyID, PublicKey: pub})
	}
	return out, nil
}

// ParsePublicKey reads an Ed25519 public key: PEM ("PUBLIC KEY", SPKI) or
// the base64 of the raw 32 bytes.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		blk, rest := pem.Decode([]byte(s))
		if blk == nil || blk.Type != "PUBLIC KEY" || len(bytes.TrimSpace(rest)) > 0 {
			return nil, errors.New("not one PEM PUBLIC KEY block")
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, err
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("a %T, not an Ed25519 key", k)
		}
		return pub, nil
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, errors.New("neither a PEM public key nor the base64 of a 32-byte Ed25519 key")
	}
	return ed25519.PublicKey(raw), nil
}

// Options says what Verify checks the envelope against.
type Options struct {
	// Trusted are the keys whose signatures are accepted.
	Trusted []TrustedKey
	// Index is the bytes of the index.json being served.
	Index []byte
	// ImageDigest returns the digest of the image being served for the
	// envelope's imageRef: the digest the process resolved the pack from
	// (an oci:// pack), or a registry's answer for imageRef. nil, or an
	// error, is image-unverifiable.
	ImageDigest func(ctx context.Context, imageRef string) (string, error)
}

// Verify checks, in Kindgi's order, that env is signed by a trusted key
// (signer-not-trusted), that the signature covers SignedBody of its fields
// (signature-invalid), that the served image is imageDigest, that the
// index's sha256 is indexHash and that the index names artifactVersion
// (image-unverifiable). A non-nil error is an *Error.
func Verify(ctx context.Context, env *Envelope, o Options) error {
	if ref := imageRefDigest(env.ImageRef); ref == "" {
		return fail(BadInput, `imageRef must be digest-pinned: "<host>/<repo>@sha256:<64-hex>", got %q`, env.ImageRef)
	} else if ref != env.ImageDigest {
		return fail(SignatureInvalid, "imageDigest %s is not the digest imageRef pins (%s)", env.ImageDigest, ref)
	}
	if env.Signature == "" || env.SignerKeyID == "" || env.SignerPublicKey == "" {
		return fail(SignatureInvalid, "the envelope is unsigned (no signerKeyId, signerPublicKey or signature)")
	}
	pub, err := ParsePublicKey(env.SignerPublicKey)
	if err != nil {
		return fail(BadInput, "signerPublicKey PEM invalid: %v", err)
	}
	trusted := false
	for _, k := range o.Trusted {
		if k.KeyID == env.SignerKeyID && k.PublicKey.Equal(pub) {
			trusted = true
			break
		}
	}
	if !trusted {
		return fail(SignerNotTrusted, "Signer key %q is not on this tenant's trust list", env.SignerKeyID)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signature)
	if err != nil {
		return fail(SignatureInvalid, "signature is not valid base64")
	}
	body := SignedBody(env.ArtifactVersion, env.ImageDigest, env.IndexHash, env.PublishedAt, env.TenantID)
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, body, sig) {
		return fail(SignatureInvalid, "Ed25519 signature does not match canonical envelope { imageDigest, artifactVersion, indexHash, tenantId, publishedAt }")
	}
	if o.ImageDigest == nil {
		return fail(ImageUnverifiable, "no image to check %s against: serve or check the pack from its image", env.ImageRef)
	}
	served, err := o.ImageDigest(ctx, env.ImageRef)
	if err != nil {
		return fail(ImageUnverifiable, "Image head probe failed: %v", err)
	}
	if served != env.ImageDigest {
		return fail(ImageUnverifiable, "Registry digest %s does not match imageRef digest %s", served, env.ImageDigest)
	}
	sum := sha256.Sum256(o.Index)
	got := "sha256:" + hex.EncodeToString(sum[:])
	if want := normalizeHash(env.IndexHash); got != want {
		return fail(ImageUnverifiable, "Image /app/index.json sha256 (%s) does not match signed indexHash (%s)", got, want)
	}
	var ix struct {
		ArtifactVersion *string `json:"artifactVersion"`
	}
	if err := json.Unmarshal(o.Index, &ix); err != nil {
		return fail(ImageUnverifiable, "Image /app/index.json is not a JSON object")
	}
	if ix.ArtifactVersion == nil || *ix.ArtifactVersion != env.ArtifactVersion {
		v := "null"
		if ix.ArtifactVersion != nil {
			v = strconv.Quote(*ix.ArtifactVersion)
		}
		return fail(ImageUnverifiable, "Image /app/index.json is artifact %s, not the signed %s", v, env.ArtifactVersion)
	}
	return nil
}

// imageRefDigest returns the sha256 digest imageRef is pinned to, or "".
func imageRefDigest(imageRef string) string {
	i := strings.LastIndex(imageRef, "@")
	if i < 0 || !digestRe.MatchString(imageRef[i+1:]) {
		return ""
	}
	return imageRef[i+1:]
}

// normalizeHash lower-cases a sha256 hash and adds the "sha256:" prefix
// when it is bare hex (Kindgi's normaliseSha256Hex).
func normalizeHash(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if !strings.HasPrefix(h, "sha256:") {
		h = "sha256:" + h
	}
	return h
}

func readCapped(path string) ([]byte, error) {
	return artifact.ReadRegular(path, MaxFileBytes) // never blocks on a FIFO
}
