package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

const injectSrc = `profiles:
  gh:
    network: bridge
    allow_hosts: [api.github.com, "*.pypi.org"]
    inject:
      - host: api.github.com
        header: Authorization
        value: "Bearer ${GITHUB_TOKEN}"
      - host: files.pypi.org
        header: X-Key
        value: "${PYPI}"
`

func TestParseInject(t *testing.T) {
	f, err := Parse("c.yaml", []byte(injectSrc))
	require.NoError(t, err)
	assert.Equal(t, []sandbox.InjectRule{
		{Host: "api.github.com", Header: "Authorization", Value: "Bearer ${GITHUB_TOKEN}"},
		{Host: "files.pypi.org", Header: "X-Key", Value: "${PYPI}"},
	}, f.Profiles["gh"].Options.Inject)
	// A later problem (a secret the daemon lacks) is reported at the
	// rule's value.
	err = f.Errorf("gh", "inject[1].value", "the daemon has no secret PYPI")
	assert.EqualError(t, err, "c.yaml:11:9: profiles.gh.inject[1].value: the daemon has no secret PYPI")
}

func TestInjectErrors(t *testing.T) {
	for name, c := range map[string]struct{ src, want string }{
		"unknown key": {"profiles:\n  a:\n    inject:\n      - {host: a.test, header: X, value: v, env: E}\n",
			`c.yaml:4:45: profiles.a.inject[0].env: unknown key (known here: header, host, value)`},
		"missing value": {"profiles:\n  a:\n    inject:\n      - {host: a.test, header: X}\n",
			`c.yaml:4:9: profiles.a.inject[0]: value is missing`},
		"not a list": {"profiles:\n  a:\n    inject: {host: a.test}\n", `c.yaml:3:13: profiles.a.inject: want a list`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(c.src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestCheckInject(t *testing.T) {
	src := `profiles:
  a:
    network: bridge
    allow_hosts: [api.test, "*.example.com"]
    inject:
      - host: other.test
        header: Authorization
        value: "Bearer ${T}"
      - host: example.com
        header: Content-Length
        value: "${T"
      - host: "*.example.com"
        header: X
        value: x
  b:
    inject:
      - {host: api.test, header: X, value: x}
`
	f, err := Parse("c.yaml", []byte(src))
	require.NoError(t, err)
	err = f.Check(sandbox.SessionOptions{Image: "img"})
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`c.yaml:6:9: profiles.a.inject[0].host: other.test is not allowed by allow_hosts`,
		`c.yaml:9:9: profiles.a.inject[1].host: example.com is not allowed by allow_hosts`,
		`c.yaml:10:9: profiles.a.inject[1].header: Content-Length frames or routes the request`,
		`c.yaml:11:9: profiles.a.inject[1].value: "${T": a ${ without its closing }`,
		`c.yaml:12:9: profiles.a.inject[2].host: "*.example.com": a rule names one host exactly, not a wildcard`,
		`c.yaml:16:5: profiles.b.inject: needs network "bridge" with allow_hosts naming each host`,
	} {
		assert.Contains(t, msg, want)
	}
}
