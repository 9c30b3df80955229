package docker

import (
	"archive/tar"
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestWithTrustEnv(t *testing.T) {
	got := withTrustEnv([]string{"A=1", "SSL_CERT_FILE=/mine", "Z=2"})
	assert.Equal(t, []string{"A=1", "CURL_CA_BUNDLE=" + sandbox.InjectBundleFile, "GIT_SSL_CAINFO=" + sandbox.InjectBundleFile,
		"NODE_EXTRA_CA_CERTS=" + sandbox.InjectCAFile, "REQUESTS_CA_BUNDLE=" + sandbox.InjectBundleFile,
		"SSL_CERT_FILE=" + sandbox.InjectBundleFile, "Z=2"}, got)
}

func TestTrustMount(t *testing.T) {
	r := &Runtime{}
	m, dir, err := r.trustMount(sandbox.SessionOptions{}, "sha256:x")
	require.NoError(t, err)
	assert.Nil(t, m)
	assert.Empty(t, dir)
	o := sandbox.SessionOptions{Inject: []sandbox.InjectRule{{Host: "a.test", Header: "X", Value: "v"}}}
	_, _, err = r.trustMount(o, "sha256:x")
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)

	r.opts.InjectTrust = &InjectTrust{CertPEM: []byte("ca"), Dir: t.TempDir()}
	m, dir, err = r.trustMount(o, "sha256:x")
	require.NoError(t, err)
	require.Len(t, m, 1)
	assert.Equal(t, sandbox.InjectCADir, m[0].Target)
	assert.True(t, m[0].ReadOnly)
	assert.Equal(t, dir, m[0].Source)
	_, other, err := r.trustMount(o, "sha256:y")
	require.NoError(t, err)
	assert.NotEqual(t, dir, other, "a folder per image")
}

func TestFirstFile(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "ca.crt", Typeflag: tar.TypeSymlink, Linkname: "../x/ca.crt"}))
	require.NoError(t, tw.Close())
	_, link, err := firstFile(&b)
	require.NoError(t, err)
	assert.Equal(t, "../x/ca.crt", link)

	b.Reset()
	tw = tar.NewWriter(&b)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "ca.crt", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}))
	_, _ = tw.Write([]byte("pem"))
	require.NoError(t, tw.Close())
	got, link, err := firstFile(&b)
	require.NoError(t, err)
	assert.Empty(t, link)
	assert.Equal(t, "pem", string(got))
}
