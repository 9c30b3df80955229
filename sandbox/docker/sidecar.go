package docker

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/sidecar"
)

// stderrTail bounds what is kept of a sidecar's stderr for errors.
const stderrTail = 2048

var _ sandbox.SidecarRuntime = (*Runtime)(nil)

// sidecarName is the container name of a session's sidecar.
func sidecarName(id, server string) string { return "sandboxd-" + id + "-mcp-" + server }

// sidecarNetworkName is the session's network for HTTP sidecars.
func sidecarNetworkName(id string) string { return "sandboxd-mcp-" + id }

// sidecarEgressName is the egress network of a session's sidecar declared
// with network bridge.
func sidecarEgressName(id, server string) string { return "sandboxd-egress-" + id + "-" + server }

// sidecarEgressKey keys the firewall rules of a sidecar's egress network:
// the session's id, so that removing the session's rules removes them
// (firewall.remove), then '/' (never in a session id, which names
// containers) and the server.
func sidecarEgressKey(id, server string) string { return id + "/" + server }

// sidecarNetworkKey keys the firewall rules of a session's sidecar network
// as sidecarEgressKey does, with "_mcp" for the server: no server's name
// starts with '_', so no egress network's key is ever the same.
func sidecarNetworkKey(id string) string { return id + "/_mcp" }

// StartSidecar starts one MCP sidecar of a session: the sandbox's security
// settings (a non-root user, no capabilities, no-new-privileges and the
// seccomp profile, a read-only root with a tmpfs /tmp, the declaration's
// memory, CPU and pids limits; the image's user when it says
// sandbox.UserImage) plus docker-init (a third-party server may not reap), no host
// port. A stdio sidecar has no network at all and is attached before it
// starts; an HTTP or SSE one joins the session's sidecar network (internal:
// no egress; made at the first such sidecar, removed with the session),
// which the host reaches at the container's address. A sidecar declared
// with network bridge also joins an egress network of its own, made and
// firewalled as a bridge session's (makeBridge, allow_hosts included);
// a stdio one has that network only. A container of the same name (an
// earlier run) is removed first, and its egress network and rules with
// it.
func (r *Runtime) StartSidecar(ctx context.Context, spec sandbox.SidecarSpec) (_ *sidecar.Conn, err error) {
	id, srv := spec.SessionID, spec.Server
	name := sidecarName(id, srv.Name)
	cctx, cancel := r.call(ctx)
	defer cancel()
	if err := r.cli.ContainerRemove(cctx, name, container.RemoveOptions{Force: true}); err != nil && !isNotFound(err) {
		return nil, fmt.Errorf("removing the earlier sidecar %s: %w", name, err)
	}
	labels := r.labels(spec.Labels)
	delete(labels, sandbox.LabelOptions)
	delete(labels, sandbox.LabelPool)
	resLabels := maps.Clone(labels)
	labels[sandbox.LabelSidecar] = srv.Name

	nets, err := r.sidecarNetworks(cctx, id, srv, resLabels)
	if err != nil {
		return nil, err
	}
	cfg, host, err := sidecarContainer(spec, labels, nets, r.opts)
	if err != nil {
		return nil, err
	}
	if srv.Workspace != "" {
		// Never let the engine make the volume (unlabelled): it must be
		// the session's.
		vol := workspaceVolume(id)
		if _, err := r.cli.VolumeInspect(cctx, vol); err != nil {
			return nil, fmt.Errorf("sidecar %s: the session's workspace volume %s: %w", srv.Name, vol, err)
		}
		host.Mounts = []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: sandbox.WorkspaceDir,
			ReadOnly: srv.Workspace == sandbox.WorkspaceReadOnly, VolumeOptions: &mount.VolumeOptions{NoCopy: true}}}
	}
	nctx, ncancel := r.call(context.WithoutCancel(ctx))
	defer ncancel()
	created, err := r.cli.ContainerCreate(nctx, cfg, host, &network.NetworkingConfig{}, nil, name)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, errImageMissing(srv.Image, err)
	case err != nil:
		return nil, fmt.Errorf("creating sidecar %s: %w", srv.Name, err)
	}
	defer func() {
		if err != nil {
			rctx, cancel := r.call(context.WithoutCancel(ctx))
			defer cancel()
			_ = r.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true})
		}
	}()
	stdio := srv.Transport == sandbox.TransportStdio
	if nets.egress != "" && !stdio {
		if err := r.cli.NetworkConnect(cctx, nets.egress, created.ID, nil); err != nil {
			return nil, fmt.Errorf("connecting sidecar %s to %s: %w", srv.Name, nets.egress, err)
		}
	}
	return r.connectSidecar(cctx, id, srv, created.ID, nets.mode)
}

// sidecarNets are the networks of a sidecar: mode is its container's
// network mode (none, the session's sidecar network, or its egress
// network for a stdio one), egress its egress network ("" without one),
// proxy its egress proxy when its allow_hosts name hosts.
type sidecarNets struct {
	mode, egress string
	proxy        netip.AddrPort
}

// sidecarNetworks makes what networks srv needs: the session's internal
// sidecar network for an HTTP or SSE server, an egress network of its own
// (an earlier one removed first) for network bridge.
func (r *Runtime) sidecarNetworks(ctx context.Context, id string, srv sandbox.MCPServer, resLabels map[string]string) (sidecarNets, error) {
	n := sidecarNets{mode: "none"}
	stdio := srv.Transport == sandbox.TransportStdio
	if !stdio {
		n.mode = sidecarNetworkName(id)
		if err := r.ensureSidecarNetwork(ctx, id, resLabels); err != nil {
			return n, err
		}
	}
	if srv.Network != sandbox.NetworkBridge {
		return n, nil
	}
	n.egress = sidecarEgressName(id, srv.Name)
	if err := r.removeSidecarEgress(ctx, id, srv.Name); err != nil {
		return n, err
	}
	egLabels := maps.Clone(resLabels)
	egLabels[sandbox.LabelSidecar] = srv.Name
	var err error
	if n.proxy, err = r.makeBridge(ctx, sidecarEgressKey(id, srv.Name), n.egress, sandbox.NetworkBridge, srv.AllowHosts, nil, egLabels); err != nil {
		return n, fmt.Errorf("sidecar %s: %w", srv.Name, err)
	}
	if stdio {
		n.mode = n.egress
	}
	return n, nil
}

// sidecarContainer is a sidecar's container: the sandbox's security
// settings plus docker-init, its limits and user, stdin attached for
// stdio.
func sidecarContainer(spec sandbox.SidecarSpec, labels map[string]string, nets sidecarNets, opts Options) (*container.Config, *container.HostConfig, error) {
	srv := spec.Server
	stdio := srv.Transport == sandbox.TransportStdio
	user := "" // sandbox.UserImage: the image's USER
	if srv.User != sandbox.UserImage {
		uid, gid, _ := sandbox.ParseUser(sandbox.SidecarUser)
		user = strconv.Itoa(uid) + ":" + strconv.Itoa(gid)
	}
	env := make([]string, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	env = withProxy(env, nets.proxy)
	secOpts, err := securityOpts()
	if err != nil {
		return nil, nil, err
	}
	pids := srv.Limits.Pids
	init := true
	cfg := &container.Config{
		Image:        srv.Image,
		User:         user,
		Env:          env,
		Labels:       labels,
		Cmd:          srv.Args,
		OpenStdin:    stdio,
		StdinOnce:    false,
		AttachStdin:  stdio,
		AttachStdout: true,
		AttachStderr: true,
	}
	if len(srv.Command) > 0 {
		cfg.Entrypoint = srv.Command
	}
	host := &container.HostConfig{
		NetworkMode:    container.NetworkMode(nets.mode),
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    secOpts,
		Init:           &init,
		OomScoreAdj:    oomScoreAdj,
		IpcMode:        container.IPCModePrivate,
		CgroupnsMode:   container.CgroupnsModePrivate,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{
			"max-size": opts.LogMaxSize, "max-file": opts.LogMaxFiles,
		}},
		Resources: container.Resources{
			Memory:     srv.Limits.Memory,
			MemorySwap: srv.Limits.Memory,
			NanoCPUs:   int64(srv.Limits.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: nofileSoft, Hard: nofileHard},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
		Tmpfs: map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777,size=" + strconv.Itoa(sandbox.SidecarTmpfs)},
	}
	if nets.proxy.IsValid() { // allow_hosts names hosts: its egress proxy answers its DNS
		host.DNS = []string{nets.proxy.Addr().String()}
	}
	return cfg, host, nil
}

// connectSidecar attaches to the created sidecar and starts it: a stdio
// one's conn is its attach stream, an HTTP or SSE one's its address on
// netMode; both keep its stderr's tail and say when it exited.
func (r *Runtime) connectSidecar(ctx context.Context, id string, srv sandbox.MCPServer, containerID, netMode string) (*sidecar.Conn, error) {
	log := r.agentLog(id).With("sidecar", srv.Name)
	stdio := srv.Transport == sandbox.TransportStdio
	hj, err := r.cli.ContainerAttach(ctx, containerID, container.AttachOptions{
		Stream: true, Stdin: stdio, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("attaching to sidecar %s: %w", srv.Name, err)
	}
	if err := r.cli.ContainerStart(ctx, containerID, container.StartOptions{}); err != nil {
		hj.Close()
		return nil, fmt.Errorf("starting sidecar %s: %w", srv.Name, err)
	}
	tail := &tailWriter{max: stderrTail, log: &lineLogger{log: log, debug: true}}
	out := io.Discard // an HTTP server's stdout is only logs
	var pr *io.PipeReader
	var pw *io.PipeWriter
	if stdio {
		pr, pw = io.Pipe()
		out = pw
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := stdcopy.StdCopy(out, tail, hj.Reader)
		tail.flush()
		if err == nil {
			err = io.EOF
		}
		if pw != nil {
			pw.CloseWithError(err)
		}
	}()
	var once sync.Once
	closeFn := func() {
		once.Do(func() {
			hj.Close()
			if pr != nil {
				pr.CloseWithError(net.ErrClosed)
			}
		})
		<-done
	}
	// done is the container's exit for every transport: its attach
	// stream ends when its main process does (or at closeFn).
	conn := &sidecar.Conn{Stderr: tail.String, Close: closeFn, Exited: done}
	if stdio {
		conn.Stream = &sidecarStream{r: pr, w: hj.Conn, close: closeFn}
		log.Debug("sidecar started", "container", containerID[:12], "transport", srv.Transport)
		return conn, nil
	}
	ins, err := r.cli.ContainerInspect(ctx, containerID)
	if err != nil {
		closeFn()
		return nil, fmt.Errorf("inspecting sidecar %s: %w", srv.Name, err)
	}
	ep := ins.NetworkSettings.Networks[netMode]
	if ep == nil || ep.IPAddress == "" {
		closeFn()
		return nil, fmt.Errorf("sidecar %s has no address on %s", srv.Name, netMode)
	}
	conn.URL = "http://" + net.JoinHostPort(ep.IPAddress, strconv.Itoa(srv.Port)) + srv.Path
	log.Debug("sidecar started", "container", containerID[:12], "transport", srv.Transport, "url", conn.URL)
	return conn, nil
}

// removeSidecarEgress removes the egress network of an earlier run of a
// sidecar (its container already gone) and its firewall rules, if any.
func (r *Runtime) removeSidecarEgress(ctx context.Context, id, server string) error {
	name := sidecarEgressName(id, server)
	if r.egress != nil {
		r.egress.Stop(sidecarEgressKey(id, server))
	}
	if r.fw != nil {
		if err := r.fw.removeKey(ctx, sidecarEgressKey(id, server)); err != nil {
			return fmt.Errorf("removing the firewall rules of %s: %w", name, err)
		}
	}
	if err := r.cli.NetworkRemove(ctx, name); err != nil && !isNotFound(err) {
		return fmt.Errorf("removing the earlier network %s: %w", name, err)
	}
	return nil
}

// ensureSidecarNetwork makes the session's internal sidecar network
// unless it exists, with the host firewall's INPUT rules of an internal
// session's network on its bridge (named as makeBridge names one, keyed
// by sidecarNetworkKey): Docker's internal flag stops forwarding, not the
// host's own address on the bridge, so without them a sidecar reaches
// every host service bound to all addresses. Where the firewall cannot be
// managed, HTTP sidecars are refused as internal sessions are, unless the
// operator accepted that (Options.InsecureBridge).
func (r *Runtime) ensureSidecarNetwork(ctx context.Context, id string, labels map[string]string) error {
	if r.fw == nil && !r.opts.InsecureBridge {
		return r.errUnguarded("mcp_servers: HTTP and SSE sidecars")
	}
	name := sidecarNetworkName(id)
	r.sidecarNetMu.Lock()
	defer r.sidecarNetMu.Unlock()
	if _, err := r.cli.NetworkInspect(ctx, name, network.InspectOptions{}); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspecting network %s: %w", name, err)
	}
	rules := netRules{sessionID: sidecarNetworkKey(id), iface: bridgeName(sidecarNetworkKey(id)), internal: true}
	_, err := r.cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Internal: true, Labels: labels,
		Options: map[string]string{bridgeNameOption: rules.iface}})
	switch {
	case cerrdefs.IsConflict(err):
		return nil // made meanwhile by another runtime, which installs its rules
	case err != nil:
		return fmt.Errorf("creating network %s: %w", name, err)
	}
	if r.fw != nil {
		if err := r.fw.install(ctx, rules); err != nil {
			return err
		}
		if err := r.fw.keepOnTop(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sidecarStream is a stdio sidecar's stdin and stdout.
type sidecarStream struct {
	r     *io.PipeReader
	w     io.Writer
	close func()
}

func (s *sidecarStream) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *sidecarStream) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *sidecarStream) Close() error                { s.close(); return nil }

// tailWriter keeps the last max bytes written and passes them on as log
// lines.
type tailWriter struct {
	max int
	log *lineLogger

	mu  sync.Mutex
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return t.log.Write(p)
}

func (t *tailWriter) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.log.flush()
}

// String is the kept tail, as valid text.
func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(strings.TrimSpace(string(t.buf)), "?")
}
