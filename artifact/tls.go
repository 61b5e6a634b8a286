package artifact

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultCertsDir is where docker (and crane, via docker's conventions)
// users keep per-registry CAs: <dir>/<host[:port]>/*.crt.
const DefaultCertsDir = "/etc/docker/certs.d"

// tlsRoots builds the CA pool for each registry address: the system pool
// (which honours SSL_CERT_FILE and SSL_CERT_DIR), the CAs given with
// WithRegistryCA, and the *.crt files of the registry's directory under
// the certs directory.
type tlsRoots struct {
	extra    []*x509.Certificate
	certsDir string

	mu    sync.Mutex
	pools map[string]*x509.CertPool
}

func newTLSRoots(caFiles []string, certsDir string) (*tlsRoots, error) {
	r := &tlsRoots{certsDir: certsDir, pools: map[string]*x509.CertPool{}}
	for _, f := range caFiles {
		certs, err := readPEMCerts(f)
		if err != nil {
			return nil, err
		}
		if len(certs) == 0 {
			return nil, fmt.Errorf("registry CA file %s holds no PEM certificate", f)
		}
		r.extra = append(r.extra, certs...)
	}
	return r, nil
}

func readPEMCerts(path string) ([]*x509.Certificate, error) {
	b, err := ReadRegular(path, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("registry CA file: %w", err)
	}
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("registry CA file %s: %w", path, err)
		}
		out = append(out, c)
	}
}

// pool returns the roots for a registry at addr ("host:port").
func (r *tlsRoots) pool(addr string) *x509.CertPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pools[addr]; ok {
		return p
	}
	p, err := x509.SystemCertPool()
	if err != nil || p == nil {
		p = x509.NewCertPool()
	}
	for _, c := range r.extra {
		p.AddCert(c)
	}
	if r.certsDir != "" {
		dirs := []string{addr}
		if host, port, err := net.SplitHostPort(addr); err == nil && port == "443" {
			dirs = append(dirs, host)
		}
		for _, d := range dirs {
			files, _ := filepath.Glob(filepath.Join(r.certsDir, d, "*.crt"))
			for _, f := range files {
				if b, err := ReadRegular(f, 4<<20); err == nil {
					p.AppendCertsFromPEM(b)
				}
			}
		}
	}
	r.pools[addr] = p
	return p
}

// dialTLS is the transport's TLS dialer: it verifies the registry's
// certificate against that registry's pool.
func (r *tlsRoots) dialTLS(dialer *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		tc := tls.Client(raw, &tls.Config{
			ServerName: strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"),
			RootCAs:    r.pool(addr),
			NextProtos: []string{"h2", "http/1.1"},
			MinVersion: tls.VersionTLS12,
		})
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
}
