package kubernetes

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Pod settings that the session does not choose.
const (
	// terminationGrace is short: the agent has nothing to save, and
	// Remove deletes with a grace of 0 anyway.
	terminationGrace = 1
	hostname         = "sandbox"
	// agentInitName is the init container of AgentVolumeInit.
	agentInitName = "sandboxd-agent"
	// AgentImagePath is where the agent image holds the static sandboxd
	// binary.
	AgentImagePath = "/sandboxd"
)

// Volume names in the Pod.
const (
	volAgent     = "sandboxd-agent"
	volRun       = "sandboxd-run"
	volTmp       = "tmp"
	volWorkspace = "workspace"
	volHome      = "home"
)

// splitMetadata puts each of m into the Pod's labels when Kubernetes
// takes it as a label (a qualified name with a value of at most 63
// characters of [A-Za-z0-9_.-]), else into its annotations: the options'
// JSON, the creation time and the image reference never fit.
func splitMetadata(m map[string]string) (labels, annotations map[string]string) {
	labels, annotations = map[string]string{}, map[string]string{}
	for k, v := range m {
		if len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0 {
			labels[k] = v
		} else {
			annotations[k] = v
		}
	}
	return labels, annotations
}

// mergedMetadata is the inverse of splitMetadata: a Pod's labels and
// annotations as the one map the manager knows (sandbox.Resource.Labels).
func mergedMetadata(om metav1.ObjectMeta) map[string]string {
	m := make(map[string]string, len(om.Labels)+len(om.Annotations))
	maps.Copy(m, om.Annotations)
	maps.Copy(m, om.Labels)
	return m
}

// homeOf is the session's HOME and the folder that needs a volume for it
// ("" when it lies in /workspace or /tmp, writable already): the session's
// Env HOME, else sandbox.FallbackHome, set in the environment (the image's
// HOME is not known on a cluster).
func homeOf(o sandbox.SessionOptions) (home, volume string, set bool) {
	home, inEnv := o.Env["HOME"]
	if !inEnv {
		home, set = sandbox.FallbackHome, true
	}
	if sandbox.Within(home, sandbox.WorkspaceDir) || sandbox.Within(home, "/tmp") || o.WritableRootfs {
		return home, "", set
	}
	return home, home, set
}

// runDirSize is the RunDir volume's size: Config.RunDirSize, at most a
// sixteenth of the session's memory in whole MiB, as on Docker.
func (r *Runtime) runDirSize(o sandbox.SessionOptions) int64 {
	return max(1<<20, min(r.cfg.RunDirSize, (o.Limits.Memory/16)&^(1<<20-1)))
}

// buildPod maps a session spec to its Pod. It is pure, so the Pod is
// unit-tested (golden files, Pod Security restricted) without a cluster.
// hosts are the /etc/hosts pins of allow_hosts.
func (r *Runtime) buildPod(spec sandbox.Spec, hosts []corev1.HostAlias) (*corev1.Pod, error) {
	o := spec.Options
	if len(spec.Command) == 0 {
		return nil, errors.New("the sandbox spec has no command")
	}
	uid, gid, err := sandbox.ParseUser(o.User)
	if err != nil {
		return nil, fmt.Errorf("user: %w", err)
	}
	meta := maps.Clone(spec.Labels)
	if meta == nil {
		meta = map[string]string{}
	}
	maps.Copy(meta, r.labels)
	labels, annotations := splitMetadata(meta)

	home, homeVol, setHome := homeOf(o)
	env := make([]corev1.EnvVar, 0, len(o.Env)+1)
	for _, k := range slices.Sorted(maps.Keys(o.Env)) {
		env = append(env, corev1.EnvVar{Name: k, Value: o.Env[k]})
	}
	if setHome {
		env = append(env, corev1.EnvVar{Name: "HOME", Value: home})
		slices.SortFunc(env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	}

	disk := func(size int64) corev1.VolumeSource {
		if o.Limits.Disk > 0 { // a hard limit, charged to memory, as Docker's tmpfs volumes
			return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(quantity(o.Limits.Disk))}}
		}
		return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(quantity(size))}}
	}
	memory := func(size int64) corev1.VolumeSource {
		return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(quantity(size))}}
	}
	vols := []corev1.Volume{
		{Name: volWorkspace, VolumeSource: disk(r.cfg.DiskLimit)},
		{Name: volTmp, VolumeSource: memory(o.Limits.Tmpfs)},
		{Name: volRun, VolumeSource: memory(r.runDirSize(o))},
	}
	mounts := []corev1.VolumeMount{
		{Name: volAgent, MountPath: sandbox.AgentDir, ReadOnly: true},
		{Name: volRun, MountPath: sandbox.RunDir},
		{Name: volTmp, MountPath: "/tmp"},
		{Name: volWorkspace, MountPath: sandbox.WorkspaceDir},
	}
	if homeVol != "" {
		vols = append(vols, corev1.Volume{Name: volHome, VolumeSource: disk(r.cfg.DiskLimit)})
		mounts = append(mounts, corev1.VolumeMount{Name: volHome, MountPath: homeVol})
	}
	var inits []corev1.Container
	secCtx := r.containerSecurity(o)
	switch r.cfg.AgentVolume {
	case AgentVolumeImage:
		vols = append(vols, corev1.Volume{Name: volAgent, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
			Reference: r.cfg.AgentImage, PullPolicy: corev1.PullPolicy(r.cfg.AgentPullPolicy),
		}}})
	case AgentVolumeInit:
		vols = append(vols, corev1.Volume{Name: volAgent, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(quantity(256 << 20))}}})
		inits = append(inits, corev1.Container{
			Name:            agentInitName,
			Image:           r.cfg.AgentImage,
			ImagePullPolicy: corev1.PullPolicy(r.cfg.AgentPullPolicy),
			// The agent binary copies itself: the image has nothing else.
			Command:         []string{AgentImagePath, "agent-install", sandbox.AgentPath},
			VolumeMounts:    []corev1.VolumeMount{{Name: volAgent, MountPath: sandbox.AgentDir}},
			SecurityContext: secCtx,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
			}},
		})
	}

	cpu := resource.NewMilliQuantity(int64(o.Limits.CPUs*1000), resource.DecimalSI)
	limits := corev1.ResourceList{
		corev1.ResourceCPU:              *cpu,
		corev1.ResourceMemory:           quantity(o.Limits.Memory).DeepCopy(),
		corev1.ResourceEphemeralStorage: quantity(r.cfg.DiskLimit).DeepCopy(),
	}
	ctr := corev1.Container{
		Name:            ContainerName,
		Image:           o.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         spec.Command, // replaces the image's ENTRYPOINT and CMD
		Env:             env,
		// With a Cwd the agent starts its terminal there (the command's
		// tools), as on Docker; without one the image's WORKDIR.
		WorkingDir:      workingDirOf(o),
		VolumeMounts:    mounts,
		SecurityContext: secCtx,
		// CPU and memory are requested as limited (the Guaranteed QoS
		// class: the last a node evicts under pressure); of the disk
		// limit, the scheduler reserves at most a GiB.
		Resources: corev1.ResourceRequirements{Limits: limits, Requests: corev1.ResourceList{
			corev1.ResourceCPU:              cpu.DeepCopy(),
			corev1.ResourceMemory:           quantity(o.Limits.Memory),
			corev1.ResourceEphemeralStorage: quantity(min(r.cfg.DiskLimit, 1<<30)),
		}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// No stdin: the agent serves its socket after stdin's EOF, and is
		// reached by pods/exec of the agent proxy only.
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        PodName(spec.SessionID),
			Namespace:   r.cfg.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](terminationGrace),
			HostUsers:                     ptr.To(r.cfg.HostUsers),
			Hostname:                      hostname,
			NodeName:                      r.cfg.Node,
			HostAliases:                   hosts,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr.To(true),
				RunAsUser:           ptr.To(int64(uid)),
				RunAsGroup:          ptr.To(int64(gid)),
				FSGroup:             ptr.To(int64(gid)),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      r.seccomp(),
			},
			InitContainers: inits,
			Containers:     []corev1.Container{ctr},
			Volumes:        vols,
		},
	}
	if len(spec.Skills) > 0 {
		addSkills(pod, secCtx)
	}
	if o.Runtime != "" {
		pod.Spec.RuntimeClassName = ptr.To(o.Runtime)
	}
	if len(hosts) == 0 {
		pod.Spec.HostAliases = nil
	}
	if o.Network == "" || o.Network == sandbox.NetworkNone || len(o.AllowHosts) > 0 {
		// No DNS to ask: the cluster's resolver is out of reach, names of
		// allow_hosts are pinned in /etc/hosts.
		pod.Spec.DNSPolicy = corev1.DNSNone
		pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}
	}
	return pod, nil
}

// containerSecurity is every container's security context: no privilege
// escalation, a read-only root (unless the session asks for a writable
// one), every capability dropped.
func (r *Runtime) containerSecurity(o sandbox.SessionOptions) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(!o.WritableRootfs),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// seccomp is the Pods' seccomp profile.
func (r *Runtime) seccomp() *corev1.SeccompProfile {
	if r.cfg.SeccompProfile == "" {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To(r.cfg.SeccompProfile)}
}

// workingDirOf is the container's working directory: the workspace when
// the session names a Cwd (the agent's terminal is started there), else
// the image's WORKDIR ("": the daemon does not read the image on a
// cluster).
func workingDirOf(o sandbox.SessionOptions) string {
	if o.Cwd != "" {
		return sandbox.WorkspaceDir
	}
	return ""
}

func quantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.BinarySI) }
