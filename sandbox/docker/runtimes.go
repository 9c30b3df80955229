package docker

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/sandbox"
)

// engineRuntimes is what the runtime knows of the engine's OCI runtimes
// (runc, runsc, ...): learnt from Info at New and again whenever a session
// asks for one it has not seen, since an engine registers runtimes on a
// reload (SIGHUP) without a restart. A session's runtime is checked against
// it before anything of the session is made: one the engine lacks fails
// closed with an *sandbox.OptionsError naming the ones it has, never a
// fallback to the default (decision 0024).
type engineRuntimes struct {
	mu    sync.Mutex
	names []string // sorted; nil while unknown
	// noNet: the runtimes registered with gVisor's network off
	// (runtimeArgs --network=none, as make runsc does).
	noNet map[string]bool
	// noSeccomp: gVisor runtimes (path ending in runsc) registered without
	// --oci-seccomp, which ignore the container's seccomp profile.
	noSeccomp map[string]bool
	fallback  string // the engine's default runtime ("runc")
	err       error  // why the last probe failed
}

// engineRuntime is what the engine says of one runtime.
type engineRuntime struct {
	path string
	args []string
}

// set records a probe's answer: each runtime's path and runtimeArgs by name.
func (e *engineRuntimes) set(runtimes map[string]engineRuntime, def string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.err = err
		return
	}
	e.names, e.fallback, e.err = slices.Sorted(maps.Keys(runtimes)), def, nil
	e.noNet, e.noSeccomp = map[string]bool{}, map[string]bool{}
	for name, rt := range runtimes {
		has := func(flag string) bool {
			return slices.ContainsFunc(rt.args, func(a string) bool { return a == "--"+flag || a == "-"+flag || a == "--"+flag+"=true" })
		}
		e.noNet[name] = has("network=none")
		e.noSeccomp[name] = path.Base(rt.path) == "runsc" && !has("oci-seccomp")
	}
}

// check says whether the engine can run a session of the runtime name (a
// resolved SessionOptions.Runtime) and network mode: nil for "" (the
// engine's default) and for a runtime it has, an *sandbox.OptionsError
// otherwise (also when the engine's runtimes could not be learnt: fail
// closed), and for a network other than none under a runtime registered
// without a network (it would silently have none).
func (e *engineRuntimes) check(name, network string) error {
	if name == "" {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.names == nil {
		why := "the engine did not answer"
		if e.err != nil {
			why = e.err.Error()
		}
		return &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
			"runtime: cannot tell whether the engine has %q (%s); refusing rather than running the session under another runtime", name, why)}}
	}
	if slices.Contains(e.names, name) {
		if e.noSeccomp[name] {
			return &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
				"runtime: the engine runs %q (gVisor) without --oci-seccomp, so it would ignore sandboxd's seccomp profile; add it to the runtime's runtimeArgs (make runsc does)", name)}}
		}
		if e.noNet[name] && network != "" && network != sandbox.NetworkNone {
			return &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
				"network: %q cannot be had under the runtime %q: the engine runs it with --network=none (see docs/security.md, gVisor); use network %q or another runtime",
				network, name, sandbox.NetworkNone)}}
		}
		return nil
	}
	return &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
		"runtime: the engine has no runtime %q (it has %s; default %q); for gVisor: make runsc, see docs/security.md",
		name, strings.Join(quoteAll(e.names), ", "), e.fallback)}}
}

// list is the engine's runtimes as last learnt (nil if never).
func (e *engineRuntimes) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.names)
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// probeRuntimes asks the engine for its runtimes.
func (r *Runtime) probeRuntimes(ctx context.Context) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	info, err := r.cli.Info(cctx)
	if err != nil {
		r.runtimes.set(nil, "", fmt.Errorf("reading the engine's runtimes: %w", err))
		return
	}
	rts := make(map[string]engineRuntime, len(info.Runtimes))
	for name, rt := range info.Runtimes {
		rts[name] = engineRuntime{path: rt.Path, args: rt.Args}
	}
	r.runtimes.set(rts, info.DefaultRuntime, nil)
}

// Runtimes are the engine's OCI runtimes as last learnt (sorted; nil when
// the engine did not say).
func (r *Runtime) Runtimes() []string { return r.runtimes.list() }

// CheckRuntime fails with an *sandbox.OptionsError unless the engine has the
// OCI runtime name ("" is the engine's default and always passes). A name
// not seen before is looked up again, so a runtime registered since New
// (make runsc reloads the engine) is found. serve --runtime calls it at start
// to refuse a default the engine lacks.
func (r *Runtime) CheckRuntime(ctx context.Context, name string) error {
	return r.checkRuntime(ctx, name, sandbox.NetworkNone)
}

// checkRuntime is CheckRuntime for a session of the network mode network;
// Start calls it for every session.
func (r *Runtime) checkRuntime(ctx context.Context, name, network string) error {
	if r.runtimes.check(name, network) == nil {
		return nil
	}
	r.probeRuntimes(ctx)
	return r.runtimes.check(name, network)
}
