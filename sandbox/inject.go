package sandbox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox/egress/inject"
)

// InjectRule sets a header on the requests a bridge session's sandbox
// makes to one host, with the daemon's secrets in its value, so the
// sandbox never holds them (SessionOptions.Inject, decision 0051). The
// sandbox holds a placeholder in the environment variable named after each
// secret instead; the egress proxy terminates TLS to Host with the
// daemon's CA, which the sandbox trusts (InjectCADir), sets Header and
// replaces the host's placeholders in every header.
type InjectRule struct {
	// Host is the exact host name (no wildcard, no port, not an address),
	// which allow_hosts must allow.
	Host string `json:"host"`
	// Header is set on every request to Host, replacing the sandbox's.
	Header string `json:"header"`
	// Value is the header's value: text with ${NAME} references to the
	// daemon's secrets ("Bearer ${GITHUB_TOKEN}").
	Value string `json:"value"`
}

// MaxInjectRules bounds SessionOptions.Inject.
const MaxInjectRules = 32

// Where a session with inject rules finds the daemon's CA (decision 0051).
const (
	// InjectCADir is mounted read-only from the daemon's folder of the
	// image: CA file (the CA alone) and bundle file (the image's roots
	// and the CA).
	InjectCADir = RunDir + "/ca"
	// InjectCAFile is the daemon's injection CA alone.
	InjectCAFile = InjectCADir + "/ca.pem"
	// InjectBundleFile is the image's trusted roots followed by the CA.
	InjectBundleFile = InjectCADir + "/bundle.pem"
)

// InjectTrustEnv are the variables a session with inject rules gets, so
// its tools trust the CA: OpenSSL and what links it (Python's ssl, Ruby,
// git's curl), Go, curl, git and Python requests read the bundle; Node
// adds NODE_EXTRA_CA_CERTS to its own roots. They replace any the image
// or the options set.
var InjectTrustEnv = map[string]string{
	"SSL_CERT_FILE":       InjectBundleFile,
	"REQUESTS_CA_BUNDLE":  InjectBundleFile,
	"CURL_CA_BUNDLE":      InjectBundleFile,
	"GIT_SSL_CAINFO":      InjectBundleFile,
	"NODE_EXTRA_CA_CERTS": InjectCAFile,
}

// InjectSecrets are the names of the secrets the rules reference, in
// order, each once: the sandbox's environment holds a placeholder under
// each name.
func InjectSecrets(rules []InjectRule) []string {
	var names []string
	seen := map[string]bool{}
	for _, r := range rules {
		t, err := inject.ParseTemplate(r.Value)
		if err != nil {
			continue
		}
		for _, n := range t.Names() {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names
}

// InjectHosts are the rules' hosts, lower-case, each once.
func InjectHosts(rules []InjectRule) []string {
	var hosts []string
	for _, r := range rules {
		if h := strings.ToLower(r.Host); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// validateInject checks the inject rules: a bridge session whose
// allow_hosts allow each rule's host by name (so its traffic goes through
// the egress proxy), exact host names, headers a rule may set, values
// that parse, no header set twice for a host.
func (o SessionOptions) validateInject(p *problems) {
	if len(o.Inject) == 0 {
		return
	}
	if o.Network != NetworkBridge {
		p.add("inject", "needs network %q with allow_hosts naming each host (the egress proxy injects), not network %q", NetworkBridge, o.Network)
	}
	if len(o.Inject) > MaxInjectRules {
		p.add("inject", "%d rules, above the limit of %d", len(o.Inject), MaxInjectRules)
		return
	}
	seen := map[string]bool{}
	for i, r := range o.Inject {
		f := fmt.Sprintf("inject[%d]", i)
		switch h, err := ParseAllowHost(r.Host); {
		case strings.HasPrefix(r.Host, "*."):
			p.add(f+".host", "%q: a rule names one host exactly, not a wildcard", r.Host)
		case err != nil:
			p.add(f+".host", "%v", err)
		case h.Name == "":
			p.add(f+".host", "%q is an address: a rule names a host, whose TLS name the proxy matches", r.Host)
		case o.Network == NetworkBridge && !allowsName(o.AllowHosts, h.Name):
			p.add(f+".host", "%s is not allowed by allow_hosts: add it (injection goes only where egress is allowed by name)", h.Name)
		}
		if err := inject.CheckHeader(r.Header); err != nil {
			p.add(f+".header", "%v", err)
		} else if k := strings.ToLower(r.Host) + "\x00" + strings.ToLower(r.Header); seen[k] {
			p.add(f+".header", "%s is set for %s twice", r.Header, r.Host)
		} else {
			seen[k] = true
		}
		if _, err := inject.ParseTemplate(r.Value); err != nil {
			p.add(f+".value", "%v", err)
		}
	}
}

// allowsName says whether allow_hosts let name through the proxy: an
// exact entry, or a "*.suffix" entry of which name is a subdomain (the
// apex is not covered).
func allowsName(allow []string, name string) bool {
	for _, a := range allow {
		a = strings.ToLower(a)
		if a == name {
			return true
		}
		if suffix, ok := strings.CutPrefix(a, "*"); ok && strings.HasPrefix(suffix, ".") && strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
			return true
		}
	}
	return false
}
