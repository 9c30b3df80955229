package inject

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadAuthorityKeepsItsKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "inject")
	a, err := LoadAuthority(dir, []string{"b.test", "A.test"}, nil)
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	st, err = os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	assert.Equal(t, []string{"a.test", "b.test"}, a.Cert().PermittedDNSDomains)
	assert.True(t, a.Cert().PermittedDNSDomainsCritical)

	// A restart: the same key, certificate and placeholders.
	b, err := LoadAuthority(dir, []string{"a.test", "b.test"}, nil)
	require.NoError(t, err)
	assert.Equal(t, a.CertPEM(), b.CertPEM())
	assert.Equal(t, a.Placeholder("TOKEN"), b.Placeholder("TOKEN"))
	assert.NotEqual(t, a.Placeholder("TOKEN"), a.Placeholder("OTHER"))
	assert.Regexp(t, `^sandboxd-placeholder-TOKEN-[0-9a-f]{24}$`, a.Placeholder("TOKEN"))

	// Other hosts: a new certificate of the same key.
	c, err := LoadAuthority(dir, []string{"a.test", "c.test"}, nil)
	require.NoError(t, err)
	assert.NotEqual(t, a.CertPEM(), c.CertPEM())
	assert.Equal(t, []string{"a.test", "c.test"}, c.Cert().PermittedDNSDomains)
	assert.Equal(t, a.Placeholder("TOKEN"), c.Placeholder("TOKEN"))
	kept, err := os.ReadFile(filepath.Join(dir, CertFile))
	require.NoError(t, err)
	assert.Equal(t, c.CertPEM(), kept)

	// Near its end, the certificate is issued again.
	late := func() time.Time { return time.Now().Add(caLifetime - caRenew/2) }
	d, err := LoadAuthority(dir, []string{"a.test", "c.test"}, late)
	require.NoError(t, err)
	assert.NotEqual(t, c.CertPEM(), d.CertPEM())

	// A key others may read is refused.
	require.NoError(t, os.Chmod(filepath.Join(dir, KeyFile), 0o644))
	_, err = LoadAuthority(dir, []string{"a.test"}, nil)
	require.ErrorContains(t, err, "readable by others")
}

func TestNameConstraintsHoldInClients(t *testing.T) {
	a, err := NewAuthority([]string{"api.test"}, nil)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(a.Cert())
	for host, ok := range map[string]bool{"api.test": true, "evil.test": false, "bank.example": false} {
		leaf, err := a.makeLeaf(host, time.Now())
		require.NoError(t, err)
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool})
		if ok {
			assert.NoError(t, err, host)
		} else {
			assert.ErrorContains(t, err, "not permitted", host)
		}
	}
}

func TestLeafCacheIsBounded(t *testing.T) {
	var hosts []string
	for i := range MaxLeaves + 10 {
		hosts = append(hosts, fmt.Sprintf("h%d.test", i))
	}
	now := time.Now()
	a, err := NewAuthority(hosts, func() time.Time { return now })
	require.NoError(t, err)
	first, err := a.leaf(hosts[0])
	require.NoError(t, err)
	again, err := a.leaf(hosts[0])
	require.NoError(t, err)
	assert.Same(t, first, again, "cached")
	for _, h := range hosts {
		_, err := a.leaf(h)
		require.NoError(t, err)
	}
	assert.Equal(t, MaxLeaves, a.cached())
	// hosts[0] was the least recently used: made again.
	evicted, err := a.leaf(hosts[0])
	require.NoError(t, err)
	assert.NotSame(t, first, evicted)

	// A leaf near its end is made again.
	last := hosts[len(hosts)-1]
	cur, err := a.leaf(last)
	require.NoError(t, err)
	now = now.Add(leafLifetime - leafRenew/2)
	renewed, err := a.leaf(last)
	require.NoError(t, err)
	assert.NotSame(t, cur, renewed)
	assert.True(t, renewed.Leaf.NotAfter.After(cur.Leaf.NotAfter))
}
