package kubetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dockerSpec is a Pod as one Docker container, with the init containers
// it runs first.
type dockerSpec struct {
	config       *container.Config
	host         *container.HostConfig
	ctr          corev1.Container
	dirs         string // host folder of the disk emptyDirs ("" if none)
	initStatuses []corev1.ContainerStatus
	// inits are the init containers run for real, in order, before the
	// Pod's container (all but the agent image's copy).
	inits []initSpec
}

// initSpec is one init container as a Docker container.
type initSpec struct {
	ctr    corev1.Container
	config *container.Config
	host   *container.HostConfig
}

// podVolumes is what the containers of one Pod mount.
type podVolumes struct {
	byName    map[string]corev1.Volume
	agent     map[string]bool   // volumes that are the agent binary
	configMap map[string]string // host folders of the configMap volumes made so far
}

// containerSpec maps a Pod to a Docker container, as far as Docker can
// and a test needs; what it cannot map is an error (the Pod fails with
// reason KubetestUnsupported), never silently dropped:
//
//   - one container; init containers of the agent image are its copy,
//     which is not run (its emptyDir becomes the agent bind, below); any
//     other init container is run for real, in order, before the Pod's
//     container, each to its exit (a failure fails the Pod);
//   - image, command, args, env (plain values), workingDir, hostname,
//     hostAliases;
//   - user and group (pod, then container security context), fsGroup and
//     supplemental groups as extra groups, runAsNonRoot checked as the
//     kubelet does, readOnlyRootFilesystem, capabilities drop/add,
//     allowPrivilegeEscalation false as no-new-privileges, seccomp
//     RuntimeDefault (Docker's default profile) or Unconfined;
//   - limits of cpu and memory (no swap); ephemeral-storage is not
//     enforced (a kubelet evicts; this node does not);
//   - volumes: an emptyDir of medium Memory is a tmpfs of its sizeLimit
//     (the Pod's containers do not share it); a disk emptyDir is a host
//     folder (mode 0777 as the kubelet makes it, its sizeLimit not
//     enforced) removed with the Pod; a configMap volume (no items) is a
//     host folder of its keys as files of its defaultMode, read from the
//     API when the Pod starts, bound read-only; the agent image volume, or
//     the emptyDir its init container fills, is the host binary bound
//     read-only at <mountPath>/sandboxd;
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
	pv := podVolumes{byName: map[string]corev1.Volume{}, agent: map[string]bool{}, configMap: map[string]string{}}
	for _, v := range ps.Volumes {
		pv.byName[v.Name] = v
		if v.Image != nil {
			if n.cfg.AgentImage == "" || v.Image.Reference != n.cfg.AgentImage {
				return nil, fmt.Errorf("image volume %q of %q: kubetest maps only the agent image %q", v.Name, v.Image.Reference, n.cfg.AgentImage)
			}
			pv.agent[v.Name] = true
		}
	}
	spec := &dockerSpec{ctr: c}
	var run []corev1.Container
	for _, ic := range ps.InitContainers {
		if n.cfg.AgentImage == "" || ic.Image != n.cfg.AgentImage {
			run = append(run, ic)
			continue
		}
		for _, m := range ic.VolumeMounts {
			pv.agent[m.Name] = true
		}
		now := metav1.Now()
		spec.initStatuses = append(spec.initStatuses, corev1.ContainerStatus{Name: ic.Name, Image: ic.Image, Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Completed", Message: "kubetest: the agent is the host binary, bound read-only", StartedAt: now, FinishedAt: now,
			}}})
	}
	for _, ic := range run {
		config, host, err := n.mapContainer(ctx, pod, ic, &pv, spec)
		if err != nil {
			return nil, fmt.Errorf("init container %q: %w", ic.Name, err)
		}
		spec.inits = append(spec.inits, initSpec{ctr: ic, config: config, host: host})
	}
	config, host, err := n.mapContainer(ctx, pod, c, &pv, spec)
	if err != nil {
		return nil, err
	}
	spec.config, spec.host = config, host
	return spec, nil
}

// mapContainer maps one container of a Pod (see containerSpec).
func (n *Node) mapContainer(ctx context.Context, pod *corev1.Pod, c corev1.Container, pv *podVolumes, spec *dockerSpec) (*container.Config, *container.HostConfig, error) {
	ps := pod.Spec
	env := make([]string, 0, len(c.Env))
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return nil, nil, fmt.Errorf("env %s: valueFrom is not supported by kubetest", e.Name)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	if len(c.EnvFrom) > 0 {
		return nil, nil, errors.New("envFrom is not supported by kubetest")
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
			return nil, nil, err
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
		return nil, nil, errors.New("privileged containers are not run by kubetest")
	}
	if sec.noNewPrivs {
		host.SecurityOpt = append(host.SecurityOpt, "no-new-privileges")
	}
	switch sec.seccomp {
	case "", corev1.SeccompProfileTypeRuntimeDefault:
	case corev1.SeccompProfileTypeUnconfined:
		host.SecurityOpt = append(host.SecurityOpt, "seccomp=unconfined")
	default:
		return nil, nil, fmt.Errorf("seccomp profile %s is not realized by kubetest", sec.seccomp)
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

	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			return nil, nil, fmt.Errorf("volume mount %q: subPath is not supported by kubetest", m.Name)
		}
		v, ok := pv.byName[m.Name]
		if !ok {
			return nil, nil, fmt.Errorf("volume mount %q: no such volume", m.Name)
		}
		switch {
		case pv.agent[m.Name]:
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
			dir, err := n.podDir(pod, spec, m.Name)
			if err != nil {
				return nil, nil, err
			}
			// The kubelet makes an emptyDir 0777 (umask aside).
			if err := os.Chmod(dir, 0o777); err != nil {
				return nil, nil, err
			}
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: dir, Target: m.MountPath, ReadOnly: m.ReadOnly})
		case v.ConfigMap != nil:
			dir, err := n.configMapDir(ctx, pod, spec, pv, v)
			if err != nil {
				return nil, nil, fmt.Errorf("volume %q: %w", m.Name, err)
			}
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: dir, Target: m.MountPath, ReadOnly: true})
		default:
			return nil, nil, fmt.Errorf("volume %q: only emptyDir, configMap and the agent image are supported by kubetest", m.Name)
		}
	}

	hostname := pod.Name
	if ps.Hostname != "" {
		hostname = ps.Hostname
	}
	config := &container.Config{
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
		config.Entrypoint = c.Command
	}
	return config, host, nil
}

// podDir is the host folder name of the Pod's folders (made once).
func (n *Node) podDir(pod *corev1.Pod, spec *dockerSpec, name string) (string, error) {
	spec.dirs = n.dirOf(pod)
	dir := filepath.Join(spec.dirs, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(spec.dirs, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// configMapDir writes a configMap volume's keys as files of its
// defaultMode into a host folder, once per Pod.
func (n *Node) configMapDir(ctx context.Context, pod *corev1.Pod, spec *dockerSpec, pv *podVolumes, v corev1.Volume) (string, error) {
	if dir, ok := pv.configMap[v.Name]; ok {
		return dir, nil
	}
	src := v.ConfigMap
	if len(src.Items) > 0 {
		return "", errors.New("configMap items are not supported by kubetest")
	}
	cm, err := n.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("configMap %s: %w", src.Name, err)
	}
	dir, err := n.podDir(pod, spec, "configmap-"+v.Name)
	if err != nil {
		return "", err
	}
	mode := os.FileMode(0o644)
	if src.DefaultMode != nil {
		mode = os.FileMode(*src.DefaultMode) & 0o777
	}
	files := map[string][]byte{}
	for k, val := range cm.Data {
		files[k] = []byte(val)
	}
	maps.Copy(files, cm.BinaryData)
	for k, b := range files {
		if strings.ContainsAny(k, "/\\") || k == "." || k == ".." {
			return "", fmt.Errorf("configMap %s: key %q", src.Name, k)
		}
		p := filepath.Join(dir, k)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return "", err
		}
		if err := os.Chmod(p, mode); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	pv.configMap[v.Name] = dir
	return dir, nil
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
