package egress

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

func TestPolicyAllows(t *testing.T) {
	p := Policy{
		Names:    []string{"pypi.org", "example.com"},
		Suffixes: []string{".githubusercontent.com"},
		Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32")},
	}
	for host, want := range map[string]bool{
		"pypi.org":                           true,
		"PyPI.Org":                           true,
		"pypi.org.":                          true,
		"files.pypi.org":                     false, // an exact name covers no subdomain
		"example.com":                        true,
		"raw.githubusercontent.com":          true,
		"a.b.githubusercontent.com":          true,
		"githubusercontent.com":              false, // the wildcard does not cover the apex
		"evilgithubusercontent.com":          false,
		"githubusercontent.com.evil.example": false,
		"192.0.2.7":                          true,
		"192.0.3.7":                          false,
		"[2001:db8::1]":                      true,
		"2001:db8::1":                        true,
		"::ffff:192.0.2.7":                   true,
		"[fe80::1%eth0]":                     false,
		"":                                   false,
		"pypi.org:443":                       false, // a port is not a host
		"py pi.org":                          false,
		"a..b":                               false,
		strings.Repeat("a.", 130) + "org":    false,
	} {
		assert.Equal(t, want, p.Allows(host), "%q", host)
	}
	assert.True(t, p.HasNames())
	assert.False(t, (&Policy{Prefixes: p.Prefixes}).HasNames())
}

func TestSplitTarget(t *testing.T) {
	type out struct {
		host string
		port int
		ok   bool
	}
	for in, want := range map[string]out{
		"example.com":       {"example.com", 80, true},
		"Example.COM:8080":  {"example.com", 8080, true},
		"example.com:":      {"", 0, false},
		"example.com:0":     {"", 0, false},
		"example.com:65536": {"", 0, false},
		"example.com:+80":   {"", 0, false},
		"example.com:080":   {"", 0, false},
		"[2001:db8::1]:443": {"2001:db8::1", 443, true},
		"[2001:db8::1]":     {"2001:db8::1", 80, true},
		"2001:db8::1":       {"2001:db8::1", 80, true},
		"[2001:db8::1]:":    {"", 0, false},
		"[2001:db8::1":      {"", 0, false},
		"10.0.0.1:22":       {"10.0.0.1", 22, true},
		"a:b:c":             {"", 0, false},
		"":                  {"", 0, false},
		"user@host:80":      {"", 0, false},
	} {
		h, p, ok := SplitTarget(in, 80)
		assert.Equal(t, want, out{h, p, ok}, "%q", in)
	}
}

// clientHello is what a TLS client sends first for serverName.
func clientHello(t testing.TB, serverName string) []byte {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}) //nolint:gosec // only its hello is read
		_ = c.Handshake()
	}()
	var got []byte
	buf := make([]byte, 4096)
	// The record header says how long the hello is.
	for len(got) < 5 || len(got) < 5+int(got[3])<<8|int(got[4]) {
		n, err := b.Read(buf)
		require.NoError(t, err)
		got = append(got, buf[:n]...)
	}
	return got
}

func TestReadClientHello(t *testing.T) {
	hello := clientHello(t, "api.example.com")
	name, read, err := ReadClientHello(bytes.NewReader(append(bytes.Clone(hello), "early"...)))
	require.NoError(t, err)
	assert.Equal(t, "api.example.com", name)
	assert.Equal(t, hello, read[:len(hello)], "every byte read is returned for replay")

	name, _, err = ReadClientHello(bytes.NewReader(clientHello(t, "")))
	require.NoError(t, err)
	assert.Empty(t, name, "a hello without SNI")

	for _, junk := range [][]byte{nil, []byte("GET / HTTP/1.1\r\n\r\n"), {0x16, 3, 1, 0xff, 0xff}, hello[:len(hello)/2]} {
		_, _, err := ReadClientHello(bytes.NewReader(junk))
		require.Error(t, err, "%q", junk)
	}
	// A record header that announces more than a hello may hold stops at
	// the bound, not at the end of an endless stream.
	_, read, err = ReadClientHello(&endless{head: []byte{0x16, 3, 1, 0x40, 0}})
	require.Error(t, err)
	assert.LessOrEqual(t, len(read), maxHello)
}

// endless is head, then zeros forever.
type endless struct{ head []byte }

func (e *endless) Read(p []byte) (int, error) {
	if len(e.head) > 0 {
		n := copy(p, e.head)
		e.head = e.head[n:]
		return n, nil
	}
	clear(p)
	return len(p), nil
}

func TestDNSAnswer(t *testing.T) {
	gw := netip.MustParseAddr("172.20.0.1")
	query := func(name string, typ dnsmessage.Type) []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
		require.NoError(t, b.StartQuestions())
		require.NoError(t, b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}))
		out, err := b.Finish()
		require.NoError(t, err)
		return out
	}
	var m dnsmessage.Message
	require.NoError(t, m.Unpack(dnsAnswer(query("denied.example.", dnsmessage.TypeA), gw)))
	assert.Equal(t, uint16(7), m.ID)
	assert.True(t, m.Response)
	require.Len(t, m.Answers, 1, "every name is answered with the gateway")
	assert.Equal(t, gw.As4(), m.Answers[0].Body.(*dnsmessage.AResource).A)

	require.NoError(t, m.Unpack(dnsAnswer(query("x.example.", dnsmessage.TypeAAAA), gw)))
	assert.Empty(t, m.Answers)
	assert.Equal(t, dnsmessage.RCodeSuccess, m.RCode)

	assert.Nil(t, dnsAnswer([]byte("junk"), gw))
	assert.Nil(t, dnsAnswer(nil, gw))
}

// The parsers meet what a sandbox sends: they never panic, and what they
// accept is normalized (lower case, no trailing dot, valid again).
func FuzzHost(f *testing.F) {
	for _, s := range []string{"example.com", "EXAMPLE.com.:443", "[::1]:80", "::1", "a..b", "x:0", "[fe80::1%25eth0]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, port, ok := SplitTarget(s, 80)
		if !ok {
			return
		}
		if port < 1 || port > 65535 {
			t.Fatalf("%q: port %d", s, port)
		}
		again, _, ok2 := NormalizeHost(h)
		if !ok2 || again != h || strings.ToLower(h) != h || strings.HasSuffix(h, ".") {
			t.Fatalf("%q: host %q is not normal (%q, %v)", s, h, again, ok2)
		}
	})
}

func FuzzClientHello(f *testing.F) {
	f.Add(clientHello(f, "api.example.com"))
	f.Add(clientHello(f, ""))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, read, err := ReadClientHello(bytes.NewReader(b))
		if len(read) > maxHello || !bytes.HasPrefix(b, read) {
			t.Fatalf("read %d bytes, not a prefix of the input", len(read))
		}
		if err != nil && name != "" {
			t.Fatalf("a name (%q) with an error", name)
		}
		_ = (&Policy{Names: []string{"api.example.com"}}).Allows(name)
	})
}
