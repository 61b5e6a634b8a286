// Package deployenv verifies Kindgi's signed deploy envelopes
// (kindgi-deploy-envelope/v1, the deploy-envelope.json `kindgi build`
// writes) against a trusted-keys file, the pack index being served and
// the image it comes from, refusing with Kindgi's error codes
// (signature-invalid, signer-not-trusted, image-unverifiable, bad-input).
// See docs/packs.md.
package deployenv
