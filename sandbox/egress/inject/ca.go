package inject

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Files of the authority in its folder (LoadAuthority).
const (
	// KeyFile is the CA's private key (PKCS #8, PEM), mode 0600: made once,
	// kept across restarts.
	KeyFile = "ca-key.pem"
	// CertFile is the CA's certificate (PEM): what sandboxes trust. It is
	// issued again, with the same key, when the inject hosts change.
	CertFile = "ca.pem"
)

// Lifetimes and bounds of certificates.
const (
	// caLifetime is how long an issued CA certificate is valid; it is
	// issued again when less than caRenew is left.
	caLifetime = 5 * 365 * 24 * time.Hour
	caRenew    = 30 * 24 * time.Hour
	// leafLifetime is a leaf's validity; a cached leaf with less than
	// leafRenew left is made again.
	leafLifetime = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
	// backdate covers clocks a little behind the daemon's.
	backdate = time.Hour
	// MaxLeaves bounds the leaf cache (least recently used out first).
	MaxLeaves = 256
)

// PlaceholderPrefix starts every placeholder (Authority.Placeholder).
const PlaceholderPrefix = "sandboxd-placeholder-"

// Authority is the daemon's certificate authority for injection: an ECDSA
// P-256 key and a certificate whose name constraints permit only the
// inject hosts (RFC 5280 4.2.1.10; IP addresses excluded), so the key can
// vouch for nothing else even where a sandbox trusts it. Leaf certificates
// are made on demand and cached (bounded). Safe for concurrent use.
type Authority struct {
	key     *ecdsa.PrivateKey
	cert    *x509.Certificate
	certPEM []byte
	hosts   []string
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*list.Element // of *leafEntry
	lru    list.List                // front: most recently used
}

type leafEntry struct {
	host string
	cert *tls.Certificate
}

// LoadAuthority reads the authority kept in dir (made 0700 if missing),
// making its key on first use, and issues its certificate again when the
// hosts differ from the kept certificate's constraints or it nears its end.
// hosts are the exact names injection may terminate. now is the clock
// (nil: time.Now).
func LoadAuthority(dir string, hosts []string, now func() time.Time) (*Authority, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("inject CA: %w", err)
	}
	key, err := loadKey(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, err
	}
	a := &Authority{key: key, hosts: normHosts(hosts), now: now, leaves: map[string]*list.Element{}}
	certPath := filepath.Join(dir, CertFile)
	if b, err := os.ReadFile(certPath); err == nil {
		if cert, ok := a.usable(b); ok {
			a.cert, a.certPEM = cert, b
			return a, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("inject CA: %w", err)
	}
	if err := a.issue(); err != nil {
		return nil, err
	}
	if err := writeFile(certPath, a.certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("inject CA: %w", err)
	}
	return a, nil
}

// NewAuthority makes an authority held in memory only (tests, benches).
func NewAuthority(hosts []string, now func() time.Time) (*Authority, error) {
	if now == nil {
		now = time.Now
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	a := &Authority{key: key, hosts: normHosts(hosts), now: now, leaves: map[string]*list.Element{}}
	return a, a.issue()
}

func normHosts(hosts []string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, strings.ToLower(h))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// loadKey reads the CA key, or makes and writes it (0600) if there is none.
// A key file others may read is refused, as --secrets-file is.
func loadKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, fmt.Errorf("inject CA: %w", err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inject CA: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("inject CA: %s is readable by others (mode %v): chmod 600 it", path, st.Mode().Perm())
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("inject CA: %s holds no PEM private key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("inject CA: %s: %w", path, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("inject CA: %s is not an ECDSA P-256 key", path)
	}
	return key, nil
}

// usable says whether a kept certificate can stay: it is this key's, its
// constraints are exactly the hosts, and it is far from its end.
func (a *Authority) usable(b []byte) (*x509.Certificate, bool) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, false
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || !cert.IsCA {
		return nil, false
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&a.key.PublicKey) {
		return nil, false
	}
	have := normHosts(cert.PermittedDNSDomains)
	now := a.now()
	return cert, slices.Equal(have, a.hosts) && now.After(cert.NotBefore) && now.Add(caRenew).Before(cert.NotAfter)
}

// issue makes the CA certificate for a.hosts.
func (a *Authority) issue() error {
	now := a.now()
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{Organization: []string{"sandboxd"}, CommonName: "sandboxd egress injection CA"},
		NotBefore:                   now.Add(-backdate),
		NotAfter:                    now.Add(caLifetime),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         a.hosts,
		ExcludedIPRanges: []*net.IPNet{
			{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &a.key.PublicKey, a.key)
	if err != nil {
		return fmt.Errorf("inject CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	a.cert, a.certPEM = cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n.Add(n, big.NewInt(1))
}

// CertPEM is the CA certificate, PEM-encoded: what a sandbox trusts.
func (a *Authority) CertPEM() []byte { return a.certPEM }

// Cert is the CA certificate.
func (a *Authority) Cert() *x509.Certificate { return a.cert }

// Hosts are the names the CA may vouch for, sorted.
func (a *Authority) Hosts() []string { return slices.Clone(a.hosts) }

// Placeholder is what a sandbox holds in place of the secret name: a
// string derived from the CA's key and the name (HMAC-SHA-256), the same
// after a restart, so adopted sessions keep theirs, and not guessable
// from outside the daemon. It says what it is, so a person reading a
// sandbox's environment is not misled.
func (a *Authority) Placeholder(name string) string {
	k, err := a.key.Bytes()
	if err != nil {
		panic(err) // a P-256 key always encodes
	}
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte("sandboxd placeholder\x00" + name))
	return PlaceholderPrefix + name + "-" + hex.EncodeToString(mac.Sum(nil))[:24]
}

// leaf returns the certificate for host, from the cache or made now.
func (a *Authority) leaf(host string) (*tls.Certificate, error) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.leaves[host]; ok {
		le := e.Value.(*leafEntry)
		if now.Add(leafRenew).Before(le.cert.Leaf.NotAfter) {
			a.lru.MoveToFront(e)
			return le.cert, nil
		}
		a.lru.Remove(e)
		delete(a.leaves, host)
	}
	cert, err := a.makeLeaf(host, now)
	if err != nil {
		return nil, err
	}
	a.leaves[host] = a.lru.PushFront(&leafEntry{host: host, cert: cert})
	for a.lru.Len() > MaxLeaves {
		old := a.lru.Back()
		a.lru.Remove(old)
		delete(a.leaves, old.Value.(*leafEntry).host)
	}
	return cert, nil
}

// cached is how many leaves the cache holds.
func (a *Authority) cached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lru.Len()
}

func (a *Authority) makeLeaf(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("inject: a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// writeFile writes b to path through a temporary file and a rename, so a
// reader never sees half a file.
func writeFile(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // gone after the rename
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
