package registrytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCA is a certificate authority made for one test, and a server
// certificate it signed for 127.0.0.1, ::1 and localhost.
type TestCA struct {
	// CAFile is the CA certificate (PEM): what a client must trust.
	CAFile string
	// CertFile and KeyFile are the server's certificate and key (PEM).
	CertFile, KeyFile string
}

// NewTestCA writes a fresh CA and a loopback server certificate into a
// temporary directory.
func NewTestCA(t testing.TB) *TestCA {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "registrytest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &TestCA{CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key")}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{c.CAFile, "CERTIFICATE", caDER}, {c.CertFile, "CERTIFICATE", der}, {c.KeyFile, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// WriteHtpasswd writes an htpasswd file for docker-registry with one user:
// alice, password s3cret (HtpasswdUser, HtpasswdPassword).
func WriteHtpasswd(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "htpasswd")
	// bcrypt (cost 5) of "s3cret"; docker-registry accepts only bcrypt.
	if err := os.WriteFile(p, []byte(HtpasswdUser+":$2a$05$5oiVWfxIs11PKfL.zV63rOCBcu1Z0UjbHlnkfR6PnP/HlkGEXZpD2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The one user of WriteHtpasswd.
const (
	HtpasswdUser     = "alice"
	HtpasswdPassword = "s3cret"
)
