package daemon

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/internal/loglimit"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/sandbox/egress"
	"github.com/sandboxd/sandboxd/sandbox/egress/inject"
	"github.com/sandboxd/sandboxd/server/config"
)

// injectDir is the injection CA's folder under the state dir.
const injectDir = "inject"

// injection is the daemon's secret injection (decision 0051): its CA, the
// secrets, and the roots that verify the real hosts. nil when no profile
// has inject rules.
type injection struct {
	auth    *inject.Authority
	secrets func(string) (string, bool)
	roots   *x509.CertPool // nil: the system's
	log     *slog.Logger
}

// setupInjection checks every profile's inject rules against the daemon's
// secrets (a missing secret, or one no header can hold, is an error at the
// rule's line, never showing a value), loads or makes the CA in
// <state-dir>/inject for the hosts of every profile, and puts each
// secret's placeholder in its profile's env under the secret's name. It
// returns nil when no profile injects.
func setupInjection(file *config.File, stateDir string, secrets func(string) (string, bool), roots *x509.CertPool, log *slog.Logger) (*injection, error) {
	var hosts []string
	var errs []error
	for _, name := range file.Names() {
		o := file.Profiles[name].Options
		for i, r := range o.Inject {
			t, err := inject.ParseTemplate(r.Value)
			if err != nil {
				continue // Check reports it at its line
			}
			for _, s := range t.Names() {
				v, ok := secrets(s)
				if !ok {
					errs = append(errs, file.Errorf(name, fmt.Sprintf("inject[%d].value", i),
						"the daemon has no secret %s (serve --secrets-file, or SANDBOXD_SECRET_%s in its environment)", s, s))
				} else if err := inject.CheckSecretValue(s, v); err != nil {
					errs = append(errs, file.Errorf(name, fmt.Sprintf("inject[%d].value", i), "%v", err))
				}
			}
		}
		for _, s := range sandbox.InjectSecrets(o.Inject) {
			if _, set := o.Env[s]; set {
				errs = append(errs, file.Errorf(name, "env", "%s is the environment variable of a secret inject sends: the sandbox gets its placeholder there; leave it out of env", s))
			}
		}
		hosts = append(hosts, sandbox.InjectHosts(o.Inject)...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, nil
	}
	auth, err := inject.LoadAuthority(filepath.Join(stateDir, injectDir), hosts, nil)
	if err != nil {
		return nil, err
	}
	for _, name := range file.Names() {
		p := file.Profiles[name]
		names := sandbox.InjectSecrets(p.Options.Inject)
		if len(names) == 0 {
			continue
		}
		env := maps.Clone(p.Options.Env)
		if env == nil {
			env = map[string]string{}
		}
		for _, s := range names {
			env[s] = auth.Placeholder(s)
		}
		p.Options.Env = env
	}
	log.Info("secret injection: the sandboxes of profiles with inject rules trust this CA for these hosts only",
		"ca", filepath.Join(stateDir, injectDir, inject.CertFile), "hosts", strings.Join(auth.Hosts(), ", "))
	return &injection{auth: auth, secrets: secrets, roots: roots, log: log}, nil
}

// injector is a session's injector, from its resolved options (a
// session's own, or an adopted one's options label): nil without rules.
func (j *injection) injector(o sandbox.SessionOptions) (*inject.Injector, error) {
	if j == nil || len(o.Inject) == 0 {
		return nil, nil
	}
	rules := make([]inject.Rule, len(o.Inject))
	for i, r := range o.Inject {
		rules[i] = inject.Rule{Host: r.Host, Header: r.Header, Value: r.Value}
	}
	// What a sandbox's requests make the injector log is bounded per
	// session, as everything a sandbox causes is (internal/loglimit).
	log := loglimit.NewLogger(j.log.With("component", "inject"), loglimit.Options{})
	return j.auth.Injector(inject.Options{Rules: rules, Secret: j.secrets, RootCAs: j.roots, Logger: log})
}

// trust is what the Docker runtime mounts in sessions with inject rules;
// nil without injection.
func (j *injection) trust(stateDir string) *docker.InjectTrust {
	if j == nil {
		return nil
	}
	return &docker.InjectTrust{CertPEM: j.auth.CertPEM(), Dir: filepath.Join(stateDir, injectDir, "trust")}
}

// interceptor is the Docker runtime's EgressInterceptor: the injector of a
// session's rules (a new session's options, or an adopted one's label),
// nil without rules. Rules this daemon cannot serve (an adopted session's
// host that no profile names any more) are logged and get none: the proxy
// then splices the host's TLS as for any allowed name, so the real host's
// certificate meets the sandbox and the placeholder leaves as it is.
func (j *injection) interceptor(o sandbox.SessionOptions) egress.Interceptor {
	in, err := j.injector(o)
	if err != nil {
		j.log.Warn("secret injection: a session's rules cannot be served; its requests carry the placeholders", "err", err)
		return nil
	}
	if in == nil {
		return nil // the interface's nil, not a nil *Injector
	}
	return in
}
