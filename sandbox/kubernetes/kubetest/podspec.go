package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dockerSpec is a Pod as one Docker container.
type dockerSpec struct {
	config       *container.Config
	host         *container.HostConfig
	ctr          corev1.Container
	dirs         string // host folder of the disk emptyDirs ("" if none)
	initStatuses []corev1.ContainerStatus
}

// containerSpec maps a Pod to a Docker container, as far as Docker can
// and a test needs; what it cannot map is an error (the Pod fails with
// reason KubetestUnsupported), never silently dropped:
//
//   - one container; init containers only the agent image's copy, which
//     is not run (its emptyDir becomes the agent bind, below);
//   - image, command, args, env (plain values), workingDir, hostname,
//     hostAliases;
//   - user and group (pod, then container security context), fsGroup and
//     supplemental groups as extra groups, runAsNonRoot checked as the
//     kubelet does, readOnlyRootFilesystem, capabilities drop/add,
//     allowPrivilegeEscalation false as no-new-privileges, seccomp
//     RuntimeDefault (Docker's default profile) or Unconfined;
//   - limits of cpu and memory (no swap); ephemeral-storage is not
//     enforced (a kubelet evicts; this node does not);
//   - volumes: an emptyDir of medium Memory is a tmpfs of its sizeLimit;
//     a disk emptyDir is a host folder (mode 0777 as the kubelet makes
//     it, its sizeLimit not enforced) removed with the Pod; the agent
//     image volume, or the emptyDir its init container fills, is the
//     host binary bound read-only at <mountPath>/sandboxd;
//   - no network: the Pod runs with Docker's "none" network, whatever
//     NetworkPolicy says; hostUsers, runtimeClassName and a Localhost
//     seccomp profile are not realized.
func (n *Node) containerSpec(ctx context.Context, pod *corev1.Pod) (*dockerSpec, error) {
	ps := pod.Spec
	if len(ps.Containers) != 1 {
		return nil, fmt.Errorf("kubetest runs one container per Pod, not %d", len(ps.Containers))
	}
	c := ps.Containers[0]
	if c.Image == "" {
		return nil, errors.New("the container has no image")
	}
	agentVols := map[string]bool{}
	var inits []corev1.ContainerStatus
	for _, v := range ps.Volumes {
		if v.Image != nil {
			if n.cfg.AgentImage == "" || v.Image.Reference != n.cfg.AgentImage {
				return nil, fmt.Errorf("image volume %q of %q: kubetest maps only the agent image %q", v.Name, v.Image.Reference, n.cfg.AgentImage)
			}
			agentVols[v.Name] = true
		}
	}
	for _, ic := range ps.InitContainers {
		if n.cfg.AgentImage == "" || ic.Image != n.cfg.AgentImage {
			return nil, fmt.Errorf("init container %q: kubetest runs only the agent image's copy, not %q", ic.Name, ic.Image)
		}
		for _, m := range ic.VolumeMounts {
			agentVols[m.Name] = true
		}
		now := metav1.Now()
		inits = append(inits, corev1.ContainerStatus{Name: ic.Name, Image: ic.Image, Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Completed", Message: "kubetest: the agent is the host binary, bound read-only", StartedAt: now, FinishedAt: now,
			}}})
	}

	env := make([]string, 0, len(c.Env))
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return nil, fmt.Errorf("env %s: valueFrom is not supported by kubetest", e.Name)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	if len(c.EnvFrom) > 0 {
		return nil, errors.New("envFrom is not supported by kubetest")
	}

	sec := effectiveSecurity(ps.SecurityContext, c.SecurityContext)
	user := ""
	if sec.uid != nil {
		user = strconv.FormatInt(*sec.uid, 10)
		if sec.gid != nil {
			user += ":" + strconv.FormatInt(*sec.gid, 10)
		}
	}
	if sec.nonRoot {
		if err := n.checkNonRoot(ctx, c.Image, sec.uid); err != nil {
			return nil, err
		}
	}
	var groups []string
	if psc := ps.SecurityContext; psc != nil {
		if psc.FSGroup != nil {
			groups = append(groups, strconv.FormatInt(*psc.FSGroup, 10))
		}
		for _, g := range psc.SupplementalGroups {
			groups = append(groups, strconv.FormatInt(g, 10))
		}
	}

	host := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: sec.readOnlyRoot,
		CapDrop:        sec.capDrop,
		CapAdd:         sec.capAdd,
		GroupAdd:       groups,
		Init:           new(bool),
		IpcMode:        container.IPCModePrivate,
		CgroupnsMode:   container.CgroupnsModePrivate,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Tmpfs:          map[string]string{},
	}
	if sec.privileged {
		return nil, errors.New("privileged containers are not run by kubetest")
	}
	if sec.noNewPrivs {
		host.SecurityOpt = append(host.SecurityOpt, "no-new-privileges")
	}
	switch sec.seccomp {
	case "", corev1.SeccompProfileTypeRuntimeDefault:
	case corev1.SeccompProfileTypeUnconfined:
		host.SecurityOpt = append(host.SecurityOpt, "seccomp=unconfined")
	default:
		return nil, fmt.Errorf("seccomp profile %s is not realized by kubetest", sec.seccomp)
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		host.Memory, host.MemorySwap = q.Value(), q.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		host.NanoCPUs = q.MilliValue() * 1_000_000
	}
	for _, h := range ps.HostAliases {
		for _, name := range h.Hostnames {
			host.ExtraHosts = append(host.ExtraHosts, name+":"+h.IP)
		}
	}

	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	spec := &dockerSpec{ctr: c, initStatuses: inits}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			return nil, fmt.Errorf("volume mount %q: subPath is not supported by kubetest", m.Name)
		}
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %q: no such volume", m.Name)
		}
		switch {
		case agentVols[m.Name]:
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: n.cfg.AgentBinary,
				Target: strings.TrimSuffix(m.MountPath, "/") + "/sandboxd", ReadOnly: true})
		case v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory:
			opts := []string{"rw", "nosuid", "nodev", "mode=1777"}
			if v.EmptyDir.SizeLimit != nil {
				opts = append(opts, "size="+strconv.FormatInt(v.EmptyDir.SizeLimit.Value(), 10))
			}
			if m.ReadOnly {
				opts[0] = "ro"
			}
			host.Tmpfs[m.MountPath] = strings.Join(opts, ",")
		case v.EmptyDir != nil:
			spec.dirs = n.dirOf(pod)
			dir := filepath.Join(spec.dirs, m.Name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
			// The kubelet makes an emptyDir 0777 (umask aside).
			if err := os.Chmod(spec.dirs, 0o755); err != nil {
				return nil, err
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				return nil, err
			}
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: dir, Target: m.MountPath, ReadOnly: m.ReadOnly})
		default:
			return nil, fmt.Errorf("volume %q: only emptyDir and the agent image are supported by kubetest", m.Name)
		}
	}

	hostname := pod.Name
	if ps.Hostname != "" {
		hostname = ps.Hostname
	}
	spec.config = &container.Config{
		Image:      c.Image,
		Cmd:        c.Args,
		Env:        env,
		WorkingDir: c.WorkingDir,
		User:       user,
		Hostname:   hostname,
		Labels:     n.labels(pod),
		OpenStdin:  c.Stdin,
		StdinOnce:  c.StdinOnce,
	}
	if len(c.Command) > 0 {
		spec.config.Entrypoint = c.Command
	}
	spec.host = host
	return spec, nil
}

// security is a container's effective security context.
type security struct {
	uid, gid        *int64
	nonRoot         bool
	readOnlyRoot    bool
	noNewPrivs      bool
	capDrop, capAdd []string
	seccomp         corev1.SeccompProfileType
	privileged      bool
}

// effectiveSecurity merges the Pod's security context with the
// container's, the container's winning, as the kubelet does.
func effectiveSecurity(p *corev1.PodSecurityContext, c *corev1.SecurityContext) security {
	var s security
	if p != nil {
		s.uid, s.gid = p.RunAsUser, p.RunAsGroup
		s.nonRoot = p.RunAsNonRoot != nil && *p.RunAsNonRoot
		if p.SeccompProfile != nil {
			s.seccomp = p.SeccompProfile.Type
		}
	}
	if c == nil {
		return s
	}
	if c.RunAsUser != nil {
		s.uid = c.RunAsUser
	}
	if c.RunAsGroup != nil {
		s.gid = c.RunAsGroup
	}
	if c.RunAsNonRoot != nil {
		s.nonRoot = *c.RunAsNonRoot
	}
	if c.SeccompProfile != nil {
		s.seccomp = c.SeccompProfile.Type
	}
	s.readOnlyRoot = c.ReadOnlyRootFilesystem != nil && *c.ReadOnlyRootFilesystem
	s.noNewPrivs = c.AllowPrivilegeEscalation != nil && !*c.AllowPrivilegeEscalation
	if c.Capabilities != nil {
		for _, d := range c.Capabilities.Drop {
			s.capDrop = append(s.capDrop, string(d))
		}
		for _, a := range c.Capabilities.Add {
			s.capAdd = append(s.capAdd, string(a))
		}
	}
	s.privileged = c.Privileged != nil && *c.Privileged
	return s
}

// checkNonRoot is the kubelet's runAsNonRoot check: a uid of 0, or none
// with an image whose user is root or not numeric, does not run.
func (n *Node) checkNonRoot(ctx context.Context, image string, uid *int64) error {
	if uid != nil {
		if *uid == 0 {
			return errors.New("container's runAsUser breaks non-root policy")
		}
		return nil
	}
	img, err := n.cfg.Docker.ImageInspect(ctx, image)
	if err != nil {
		return fmt.Errorf("image %s: %w", image, err)
	}
	u := ""
	if img.Config != nil {
		u, _, _ = strings.Cut(img.Config.User, ":")
	}
	if id, err := strconv.ParseInt(u, 10, 64); err != nil || id == 0 {
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric or root user %q", u)
	}
	return nil
}
