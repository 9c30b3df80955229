package docker

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// allowedNames counts, per syscall, the rules of p that name it with an
// action other than failing it (conditions not evaluated).
func allowedNames(p *seccomp.Seccomp) map[string]int {
	out := map[string]int{}
	for _, r := range p.Syscalls {
		if r.Action == specs.ActErrno || r.Action == specs.ActKill || r.Action == specs.ActKillProcess || r.Action == specs.ActKillThread {
			continue
		}
		for _, n := range append(slices.Clone(r.Names), r.Name) { //nolint:staticcheck // the legacy single-name form counts too
			if n != "" {
				out[n]++
			}
		}
	}
	return out
}

// The profile sandboxes run with is Docker's default (as the module in
// go.mod ships it) with io_uring refused and nothing else changed.
func TestSeccompProfile(t *testing.T) {
	js, err := seccompProfile()
	require.NoError(t, err)
	again, err := seccompProfile()
	require.NoError(t, err)
	assert.Equal(t, js, again, "built once")
	for _, n := range deniedSyscalls {
		assert.NotContains(t, js, `"`+n+`"`, "no rule names %s", n)
	}
	assert.NotContains(t, js, "unconfined")

	var got seccomp.Seccomp
	require.NoError(t, json.Unmarshal([]byte(js), &got))
	assert.Equal(t, specs.ActErrno, got.DefaultAction, "what no rule names fails")
	require.NotNil(t, got.DefaultErrnoRet)
	assert.EqualValues(t, 1, *got.DefaultErrnoRet, "with EPERM")

	// Everything else is the default profile's, rule for rule.
	def := seccomp.DefaultProfile()
	require.Len(t, got.Syscalls, len(def.Syscalls), "no rule named io_uring alone in this moby version")
	for i, r := range def.Syscalls {
		want := *r
		want.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool { return slices.Contains(deniedSyscalls, n) })
		wb, _ := json.Marshal(&want)
		gb, _ := json.Marshal(got.Syscalls[i])
		assert.JSONEq(t, string(wb), string(gb), "rule %d", i)
	}
	allowed := allowedNames(&got)
	assert.Positive(t, allowed["read"])
	assert.Positive(t, allowed["execve"])
	assert.Positive(t, allowed["epoll_wait"])

	// As the engine evaluates it for a container without capabilities:
	// no io_uring syscall among the allowed, clone3 still ENOSYS (so libc
	// falls back to clone), mount and friends absent.
	rs := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	eff, err := seccomp.LoadProfile(js, rs)
	require.NoError(t, err)
	for _, r := range eff.Syscalls {
		for _, n := range r.Names {
			if slices.Contains(deniedSyscalls, n) || n == "mount" || n == "unshare" || n == "bpf" {
				assert.NotEqual(t, specs.ActAllow, r.Action, "%s is allowed", n)
			}
			if n == "clone3" {
				assert.Equal(t, specs.ActErrno, r.Action)
			}
		}
	}
	assert.Less(t, len(js), 32<<10, "small enough to ride in every create")
}

// Removal works wherever the names appear: among others in an allow
// rule, alone in a rule, in the legacy single-name field; other rules and
// the default action are kept, and the input is not changed.
func TestWithoutSyscalls(t *testing.T) {
	in := &seccomp.Seccomp{
		LinuxSeccomp: specs.LinuxSeccomp{DefaultAction: specs.ActErrno},
		Syscalls: []*seccomp.Syscall{
			{LinuxSyscall: specs.LinuxSyscall{Names: []string{"read", "io_uring_setup", "write", "io_uring_enter"}, Action: specs.ActAllow}},
			{LinuxSyscall: specs.LinuxSyscall{Names: []string{"io_uring_register"}, Action: specs.ActAllow}, Includes: &seccomp.Filter{Caps: []string{"CAP_SYS_ADMIN"}}},
			{Name: "io_uring_setup", LinuxSyscall: specs.LinuxSyscall{Action: specs.ActAllow}},
			{Name: "close", LinuxSyscall: specs.LinuxSyscall{Action: specs.ActAllow}},
		},
	}
	before, _ := json.Marshal(in)
	out, err := withoutSyscalls(in, deniedSyscalls)
	require.NoError(t, err)
	after, _ := json.Marshal(in)
	assert.Equal(t, string(before), string(after), "input unchanged")
	assert.Equal(t, map[string]int{"read": 1, "write": 1, "close": 1}, allowedNames(out))
	require.Len(t, out.Syscalls, 2)
	assert.Equal(t, specs.ActErrno, out.DefaultAction)

	_, err = withoutSyscalls(&seccomp.Seccomp{LinuxSeccomp: specs.LinuxSeccomp{DefaultAction: specs.ActAllow}}, deniedSyscalls)
	require.Error(t, err, "removing a name from an allow-by-default profile would allow it")
	assert.Contains(t, err.Error(), "SCMP_ACT_ALLOW", err)
}

// Containers carry the id of their seccomp profile; one without it, or
// with another, is outdated.
func TestSeccompLabel(t *testing.T) {
	id := seccompProfileID()
	require.Len(t, id, 16)
	o := resolved(t, sandbox.SessionOptions{})
	cs, err := testRuntime(false).buildContainer(sandbox.Spec{SessionID: "s", Options: o, Labels: sandbox.SessionLabels("s", o, "", testTime), Command: agentCmd(t, o)}, "none", layout{})
	require.NoError(t, err)
	assert.Equal(t, id, cs.config.Labels[LabelSeccomp])
	assert.Empty(t, outdated(cs.config.Labels))
	assert.Contains(t, outdated(map[string]string{}), "created before sandboxd applied its own seccomp profile")
	assert.Contains(t, outdated(map[string]string{LabelSeccomp: "0123"}), "seccomp profile 0123, not this daemon's "+id)
}
