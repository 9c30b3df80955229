package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateInject(t *testing.T) {
	base := SessionOptions{Network: NetworkBridge, AllowHosts: []string{"api.test", "files.test"}}
	rule := InjectRule{Host: "api.test", Header: "Authorization", Value: "Bearer ${TOKEN}"}
	for name, c := range map[string]struct {
		change func(*SessionOptions)
		want   string // "" valid
	}{
		"valid":        {func(o *SessionOptions) {}, ""},
		"case of host": {func(o *SessionOptions) { o.Inject[0].Host = "API.test" }, ""},
		"no bridge":    {func(o *SessionOptions) { o.Network, o.AllowHosts = NetworkNone, nil }, `inject: needs network "bridge"`},
		"not allowed":  {func(o *SessionOptions) { o.Inject[0].Host = "other.test" }, "inject[0].host: other.test is not allowed by allow_hosts"},
		"address":      {func(o *SessionOptions) { o.Inject[0].Host = "192.0.2.1" }, `inject[0].host: "192.0.2.1" is an address`},
		"wildcard":     {func(o *SessionOptions) { o.Inject[0].Host = "*.test" }, "not a wildcard"},
		"forbidden":    {func(o *SessionOptions) { o.Inject[0].Header = "Host" }, "inject[0].header: Host frames or routes the request"},
		"twice":        {func(o *SessionOptions) { o.Inject = append(o.Inject, o.Inject[0]) }, "inject[1].header: Authorization is set for api.test twice"},
		"bad value":    {func(o *SessionOptions) { o.Inject[0].Value = "${" }, "inject[0].value:"},
		"too many":     {func(o *SessionOptions) { o.Inject = make([]InjectRule, MaxInjectRules+1) }, "above the limit of 32"},
		"other header ok": {func(o *SessionOptions) {
			o.Inject = append(o.Inject, InjectRule{Host: "files.test", Header: "X", Value: "${B}"})
		}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			o := base
			o.Inject = []InjectRule{rule}
			c.change(&o)
			p := problems{}
			o.validateInject(&p)
			if c.want == "" {
				assert.Empty(t, p)
				return
			}
			require.Error(t, p.err())
			assert.Contains(t, p.err().Error(), c.want)
		})
	}
}

func TestInjectComesFromTheProfile(t *testing.T) {
	profile := SessionOptions{Network: NetworkBridge, AllowHosts: []string{"api.test"},
		Inject: []InjectRule{{Host: "api.test", Header: "X", Value: "${A}:${B}"}, {Host: "api.test", Header: "Y", Value: "${A}"}}}
	got := SessionOptions{Env: map[string]string{"K": "v"}}.Over(profile)
	assert.Equal(t, profile.Inject, got.Inject)
	assert.Equal(t, []string{"A", "B"}, InjectSecrets(got.Inject))
	assert.Equal(t, []string{"api.test"}, InjectHosts(got.Inject))
}

func TestAllowsName(t *testing.T) {
	allow := []string{"exact.test", "*.wild.test"}
	for name, want := range map[string]bool{"exact.test": true, "a.wild.test": true, "a.b.wild.test": true, "wild.test": false, "x.exact.test": false} {
		assert.Equal(t, want, allowsName(allow, name), name)
	}
}
