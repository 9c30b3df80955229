package sandbox

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAllowHost(t *testing.T) {
	for in, want := range map[string]AllowHost{
		"pypi.org":                {Name: "pypi.org"},
		"Files.PythonHosted.org":  {Name: "files.pythonhosted.org"},
		"localhost":               {Name: "localhost"},
		"xn--bcher-kva.example":   {Name: "xn--bcher-kva.example"},
		"192.0.2.7":               {Prefix: netip.MustParsePrefix("192.0.2.7/32")},
		"2001:db8::1":             {Prefix: netip.MustParsePrefix("2001:db8::1/128")},
		"192.0.2.77/24":           {Prefix: netip.MustParsePrefix("192.0.2.0/24")},
		"2001:db8::/32":           {Prefix: netip.MustParsePrefix("2001:db8::/32")},
		"*.GitHubUserContent.com": {Name: "githubusercontent.com", Wildcard: true},
		"*.a.b.example":           {Name: "a.b.example", Wildcard: true},
	} {
		got, err := ParseAllowHost(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	w, _ := ParseAllowHost("*.Example.com")
	assert.Equal(t, "*.example.com", w.String())
	assert.True(t, HasHostNames([]string{"192.0.2.1", "*.example.com"}))
	assert.False(t, HasHostNames([]string{"192.0.2.1", "10.0.0.0/8", "not a host"}))
	for in, msg := range map[string]string{
		"":                                "is empty",
		"0.0.0.0/0":                       "allows every address",
		"::/0":                            "allows every address",
		"192.0.2.0/33":                    "not a CIDR prefix",
		"fe80::1%eth0":                    "with a zone",
		"exa_mple.com":                    "neither an IP address",
		"-bad.example":                    "neither an IP address",
		"a..b":                            "neither an IP address",
		"http://pypi.org":                 "is a URL",
		"pypi.org:443":                    "neither an IP address",
		"192.0.2.300":                     "cannot end in a number",
		strings.Repeat("a.", 130) + "com": "longer than a host name",
		"*.com":                           "a whole top-level domain",
		"*":                               "only a leading",
		"*.*.example.com":                 "only a leading",
		"a.*.example.com":                 "only a leading",
		"*example.com":                    "only a leading",
		"*.192.0.2.1":                     "cannot end in a number",
	} {
		_, err := ParseAllowHost(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), msg, in)
	}
}

func TestValidateAllowHosts(t *testing.T) {
	base := SessionOptions{Image: "img", Network: NetworkBridge}
	ok := base
	ok.AllowHosts = []string{"pypi.org", "192.0.2.1", "10.0.0.0/8"}
	r, err := ok.Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, ok.AllowHosts, r.AllowHosts)

	bad := func(o SessionOptions, msg string) {
		t.Helper()
		_, err := o.Resolve(SessionOptions{})
		require.ErrorIs(t, err, ErrInvalidOptions)
		assert.Contains(t, err.Error(), msg)
	}
	for _, n := range []string{NetworkNone, NetworkInternal, "mynet"} {
		o := base
		o.Network, o.AllowHosts = n, []string{"pypi.org"}
		bad(o, `allow_hosts: needs network "bridge"`)
	}
	o := base
	o.AllowHosts = []string{"pypi.org", "PyPI.org"}
	bad(o, `"PyPI.org" is listed twice`)
	o.AllowHosts = []string{"*.example.com", "example.com"}
	_, err = o.Resolve(SessionOptions{})
	require.NoError(t, err, "a wildcard and its apex are two entries")
	o.AllowHosts = []string{"ok.example", "not a host"}
	bad(o, `allow_hosts: [1]: "not a host" is neither`)
	o.AllowHosts = nil
	for i := range MaxAllowHosts + 1 {
		o.AllowHosts = append(o.AllowHosts, fmt.Sprintf("h%d.example", i))
	}
	bad(o, "65 entries, above the limit of 64")
}

func TestAllowHostsInPoolKey(t *testing.T) {
	a := SessionOptions{Image: "img", Network: NetworkBridge}
	b := a
	b.AllowHosts = []string{"pypi.org"}
	ra, err := a.Resolve(SessionOptions{})
	require.NoError(t, err)
	rb, err := b.Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, ra.Key(), rb.Key(), "a pooled unrestricted sandbox is never handed to an allow_hosts request")
}
