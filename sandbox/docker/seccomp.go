package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// deniedSyscalls are taken out of Docker's default seccomp profile: the
// io_uring interface, a large and fast-moving kernel surface behind many
// local privilege escalations (gVisor leaves it off by default, Google
// turned it off in ChromeOS and on its servers, and moby's own default
// profile dropped it in 25.0). An engine applies the default of its own
// version: Docker 20.10's allows all three, so a sandbox got a working
// io_uring instance. Nothing sandboxd's tools need uses it, and programs
// that probe for it (libuv, so Node.js) fall back to threads or epoll when
// io_uring_setup fails.
var deniedSyscalls = []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}

// seccompProfile is the JSON of the seccomp profile every sandbox runs
// with, passed as "seccomp=<json>" in HostConfig.SecurityOpt (the engine
// then evaluates its capability, architecture and kernel conditions as it
// does for its own default). It is Docker's default profile as the moby
// module in go.mod ships it (github.com/moby/profiles/seccomp, which
// github.com/docker/docker/profiles/seccomp.DefaultProfile returns), minus
// deniedSyscalls, derived here rather than copied so a module update brings
// moby's changes along. Built once; the engine stores it with the container.
var seccompProfile = sync.OnceValues(func() (string, error) {
	p, err := restrictedProfile()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(p)
	return string(b), err
})

// LabelSeccomp on a container names the seccomp profile it was created
// with (seccompProfileID), so a daemon with another profile (an older
// sandboxd, or a moby module with a changed default) never hands out a
// warm container made with the old one (see sandbox.Resource.Outdated).
const LabelSeccomp = "sandboxd.seccomp"

// seccompProfileID is a short hash of seccompProfile; "" if there is none.
var seccompProfileID = sync.OnceValue(func() string {
	p, err := seccompProfile()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(p))
	return hex.EncodeToString(sum[:8])
})

// restrictedProfile is seccomp.DefaultProfile without deniedSyscalls.
func restrictedProfile() (*seccomp.Seccomp, error) {
	return withoutSyscalls(seccomp.DefaultProfile(), deniedSyscalls)
}

// withoutSyscalls takes names out of every rule of p: a rule naming only
// those goes, the others keep their other names. Since p's default action
// fails a syscall (EPERM), a syscall no rule names is refused; a profile
// with any other default action is refused, as removing names from it
// could allow them.
func withoutSyscalls(p *seccomp.Seccomp, names []string) (*seccomp.Seccomp, error) {
	if p.DefaultAction != specs.ActErrno {
		return nil, fmt.Errorf("the default profile's default action is %q, not %q", p.DefaultAction, specs.ActErrno)
	}
	denied := func(n string) bool { return slices.Contains(names, n) }
	kept := make([]*seccomp.Syscall, 0, len(p.Syscalls))
	for _, r := range p.Syscalls {
		rule := *r
		rule.Names = slices.DeleteFunc(slices.Clone(r.Names), denied)
		// Name is deprecated but a profile may still use that legacy
		// single-name form; ignoring it would let a denied name through.
		if denied(rule.Name) { //nolint:staticcheck // see above
			rule.Name = "" //nolint:staticcheck // see above
		}
		if len(rule.Names) > 0 || rule.Name != "" { //nolint:staticcheck // see above
			kept = append(kept, &rule)
		}
	}
	out := *p
	out.Syscalls = kept
	return &out, nil
}

// securityOpts are HostConfig.SecurityOpt: no_new_privs (setuid bits and
// file capabilities grant nothing) and sandboxd's seccomp profile, never
// "unconfined".
func securityOpts() ([]string, error) {
	profile, err := seccompProfile()
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	return []string{"no-new-privileges:true", "seccomp=" + profile}, nil
}
