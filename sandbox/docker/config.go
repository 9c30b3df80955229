package docker

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Hardening constants (see ARCHITECTURE.md, "Container settings").
const (
	// oomScoreAdj makes a sandbox the host OOM killer's first choice over
	// the daemon and the engine.
	oomScoreAdj = 500
	// nofile bounds open files per process.
	nofileSoft, nofileHard = 4096, 8192
	hostname               = "sandbox"
)

// containerSpec is everything ContainerCreate takes.
type containerSpec struct {
	name    string
	config  *container.Config
	host    *container.HostConfig
	network *network.NetworkingConfig
}

// buildContainer maps a session spec to engine settings. It is pure, so
// the security settings are unit-tested without an engine; e2e reads them
// back from a real container.
func (r *Runtime) buildContainer(spec sandbox.Spec, netName string, l layout, extra ...mount.Mount) (containerSpec, error) {
	o := spec.Options
	uid, gid := l.uid, l.gid
	env := make([]string, 0, len(o.Env)+2)
	for k, v := range o.Env {
		if k == "PATH" && l.path != "" {
			continue
		}
		env = append(env, k+"="+v)
	}
	if l.path != "" {
		env = append(env, "PATH="+l.path)
	}
	if l.setHome {
		env = append(env, "HOME="+l.home)
	}
	env = append(env, imageEnv(o, l.image)...)
	sort.Strings(env)
	labels := r.labels(spec.Labels)
	labels[LabelSeccomp] = seccompProfileID()
	cmd := spec.Command
	if len(cmd) == 0 {
		return containerSpec{}, errors.New("the sandbox spec has no command")
	}

	cfg := &container.Config{
		Image: o.Image,
		User:  strconv.Itoa(uid) + ":" + strconv.Itoa(gid), // "1234" alone would get gid 0 from an image without that user
		Env:   env,
		// A Cwd the session names is not the WorkingDir: the engine would
		// make a missing one, owned by root. The terminal starts in it
		// (AgentToolSpecs's "dir"); Start checks that it exists
		// (checkCwd), or the agent creates it in the workspace. Without
		// one, the agent starts in the image's WORKDIR (layout).
		WorkingDir: workingDirOf(o, l),
		Hostname:   hostname,
		Labels:     labels,
		Entrypoint: cmd[:1], // replaces any entrypoint of the image
		Cmd:        cmd[1:],
		// The agent's stdio is the protocol stream: stdin open and kept
		// open when an attach ends (StdinOnce false), no TTY so stdout and
		// stderr stay apart (multiplexed, demuxed with stdcopy).
		OpenStdin:    true,
		StdinOnce:    false,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Tty:          false,
	}

	secOpts, err := securityOpts()
	if err != nil {
		return containerSpec{}, err
	}
	pids := o.Limits.Pids
	// No docker-init: the agent is PID 1 and its own init (it reaps, and
	// unlike docker-init it is non-dumpable, so the attach pipes it holds
	// cannot be opened through /proc/1/fd by tools). Explicitly false: nil
	// would take the engine's default, which may be --init. Decision 0021.
	init := false
	host := &container.HostConfig{
		NetworkMode:    container.NetworkMode(netName),
		ReadonlyRootfs: !o.WritableRootfs,
		CapDrop:        []string{"ALL"},
		// no-new-privileges and Docker's default seccomp profile without
		// io_uring (seccomp.go), never seccomp=unconfined.
		SecurityOpt: secOpts,
		Init:        &init,
		// The OCI runtime: "" is the engine's default (runc); "runsc" is
		// gVisor (decision 0024). Start has checked the engine has it.
		Runtime:     o.Runtime,
		OomScoreAdj: oomScoreAdj,
		IpcMode:     container.IPCModePrivate,
		// A cgroup namespace of its own: /proc/self/cgroup shows "/", not
		// the host's /docker/<full container id> (Docker 20.10 on cgroup
		// v1 defaults to the host's).
		CgroupnsMode: container.CgroupnsModePrivate,
		ShmSize:      shmSize(o),
		// No PortBindings, no PublishAllPorts: nothing is published on
		// the host; the agent is reached over stdio.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{
			"max-size": r.opts.LogMaxSize, "max-file": r.opts.LogMaxFiles,
		}},
		Resources: container.Resources{
			Memory:     o.Limits.Memory,
			MemorySwap: o.Limits.Memory, // equal: no swap
			NanoCPUs:   int64(o.Limits.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: nofileSoft, Hard: nofileHard},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
		Tmpfs: map[string]string{
			"/tmp": "rw,nosuid,nodev,mode=1777,size=" + strconv.FormatInt(o.Limits.Tmpfs, 10),
			sandbox.RunDir: fmt.Sprintf("rw,nosuid,nodev,noexec,mode=0700,uid=%d,gid=%d,size=%d",
				uid, gid, r.runDirSize(o)),
		},
		Mounts: []mount.Mount{r.agentMount(o)},
	}
	for _, v := range l.vols {
		host.Mounts = append(host.Mounts, volumeMount(v))
	}
	host.Mounts = append(host.Mounts, extra...)
	return containerSpec{
		name:    containerName(spec.SessionID, spec.Pooled),
		config:  cfg,
		host:    host,
		network: &network.NetworkingConfig{},
	}, nil
}

// workingDirOf is the container's working directory: the workspace when
// the session names a Cwd (the terminal is started there; see
// buildContainer), else the layout's (the image's WORKDIR, or the
// workspace).
func workingDirOf(o sandbox.SessionOptions, l layout) string {
	if o.Cwd != "" || l.cwd == "" {
		return sandbox.WorkspaceDir
	}
	return l.cwd
}

// runDirSize is the size of the RunDir tmpfs: Options.RunDirSize, but at
// most a sixteenth of the session's memory in whole MiB (4 MiB at
// sandbox.MinMemory). Its pages (the terminal's saved full outputs, kept
// until the tmpfs is full) are charged to the memory limit like /tmp's,
// and sandbox.MemoryHeadroom counts on them staying this few.
func (r *Runtime) runDirSize(o sandbox.SessionOptions) int64 {
	return min(r.opts.RunDirSize, (o.Limits.Memory/16)&^(1<<20-1))
}

// shmSize is the size of /dev/shm: Docker's 64 MiB, but at most a
// sixteenth of the session's memory in whole MiB, as for RunDir. It is a
// tmpfs too, charged to the memory limit, and sandbox.MemoryHeadroom holds
// both; at Docker's size it could take a small session's whole headroom.
func shmSize(o sandbox.SessionOptions) int64 {
	return min(64<<20, (o.Limits.Memory/16)&^(1<<20-1))
}

// volumeMount mounts one of the session's volumes. A volume sandboxd
// seeds itself is mounted without the engine's copy-up, which would copy
// the image's owners over the session user's (see seed.go).
func volumeMount(v vol) mount.Mount {
	if v.seed == seedOverlay {
		return mount.Mount{Type: mount.TypeBind, Source: v.bind, Target: v.target, BindOptions: &mount.BindOptions{NonRecursive: true}}
	}
	m := mount.Mount{Type: mount.TypeVolume, Source: v.name, Target: v.target}
	if v.seed == seedOwned {
		m.VolumeOptions = &mount.VolumeOptions{NoCopy: true}
	}
	return m
}

// volumeOptions are the driver options of the session's volumes: none (a
// plain local volume), or with a Disk limit a size-capped tmpfs owned by
// the session user.
func volumeOptions(o sandbox.SessionOptions, l layout) map[string]string {
	if o.Limits.Disk == 0 {
		return nil
	}
	return map[string]string{
		"type":   "tmpfs",
		"device": "tmpfs",
		"o": fmt.Sprintf("size=%d,uid=%d,gid=%d,mode=0755,nosuid,nodev",
			o.Limits.Disk, l.uid, l.gid),
	}
}
