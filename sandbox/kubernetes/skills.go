package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes/skilltar"
)

// A session's skills reach its Pod as one gzip-compressed tar in a
// ConfigMap of the session's name, unpacked by an init container into an
// emptyDir the sandbox's container mounts read-only at sandbox.SkillsDir
// (decision 0048).
const (
	// MaxSkillsArchive bounds the compressed skills of one session: a
	// ConfigMap holds at most 1 MiB (data and binaryData together), and
	// the rest is left for its metadata.
	MaxSkillsArchive = 1<<20 - 16<<10
	// skillsKey is the archive's key in the ConfigMap.
	skillsKey = "skills.tar.gz"
	// skillsInitName is the init container that unpacks the skills.
	skillsInitName = "sandboxd-skills"
	// skillsSrcDir is where the init container sees the ConfigMap.
	skillsSrcDir = "/run/sandboxd-skills"
	volSkills    = "skills"
	volSkillsSrc = "skills-archive"
)

// packSkills is the archive of the session's skill folders, or the error
// that refuses the session: a folder that cannot be read safely (an
// *sandbox.OptionsError naming the skill), or skills above the bounds.
func packSkills(skills []sandbox.SkillMount) ([]byte, skilltar.Packed, error) {
	var buf bytes.Buffer
	st, err := skilltar.Pack(&buf, skills)
	var re *skilltar.Refused
	switch {
	case errors.As(err, &re):
		return nil, st, &sandbox.OptionsError{Problems: []string{"skills: " + re.Error()}}
	case err != nil:
		return nil, st, &sandbox.OptionsError{Problems: []string{err.Error()}}
	case buf.Len() > MaxSkillsArchive:
		return nil, st, &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
			"skills: the selected skills are %d KiB compressed (%d files, %d KiB); a Kubernetes session carries at most %d KiB of them "+
				"(one ConfigMap); select fewer skills, or use the Docker runtime", buf.Len()>>10, st.Files, st.Bytes>>10, MaxSkillsArchive>>10)}}
	}
	return buf.Bytes(), st, nil
}

// buildSkillsConfigMap is the ConfigMap holding a session's skills
// archive: immutable (the kubelet need not watch it), labelled as the
// session's other objects so that List finds it and Remove deletes it.
func (r *Runtime) buildSkillsConfigMap(id string, archive []byte) *corev1.ConfigMap {
	labels := maps.Clone(r.labels)
	labels[sandbox.LabelSession] = id
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(id), Namespace: r.cfg.Namespace, Labels: labels},
		Immutable:  ptr.To(true),
		BinaryData: map[string][]byte{skillsKey: archive},
	}
}

// addSkills adds to a Pod what shows its skills read-only at
// sandbox.SkillsDir: the ConfigMap as a volume, an emptyDir, and an init
// container that runs `sandboxd skills-unpack` from the agent volume (so
// after the agent's own init container, if any) in the session's image,
// as the session's user, with the security context of every container.
// The session's container mounts the emptyDir read-only: the session's
// user owns the files, but cannot change them.
func addSkills(pod *corev1.Pod, secCtx *corev1.SecurityContext) {
	ps := &pod.Spec
	ps.Volumes = append(ps.Volumes,
		corev1.Volume{Name: volSkillsSrc, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: pod.Name}, DefaultMode: ptr.To[int32](0o444),
		}}},
		corev1.Volume{Name: volSkills, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(quantity(skilltar.MaxBytes + 16<<20)),
		}}},
	)
	main := &ps.Containers[0]
	ps.InitContainers = append(ps.InitContainers, corev1.Container{
		Name:            skillsInitName,
		Image:           main.Image,
		ImagePullPolicy: main.ImagePullPolicy,
		Command:         []string{sandbox.AgentPath, "skills-unpack", skillsSrcDir + "/" + skillsKey, sandbox.SkillsDir},
		VolumeMounts: []corev1.VolumeMount{
			{Name: volAgent, MountPath: sandbox.AgentDir, ReadOnly: true},
			{Name: volSkillsSrc, MountPath: skillsSrcDir, ReadOnly: true},
			{Name: volSkills, MountPath: sandbox.SkillsDir},
		},
		SecurityContext: secCtx,
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
	})
	main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: volSkills, MountPath: sandbox.SkillsDir, ReadOnly: true})
}

// createSkills creates the ConfigMap of a session's skills.
func (r *Runtime) createSkills(ctx context.Context, id string, archive []byte) error {
	cctx, cancel := r.call(ctx)
	defer cancel()
	if _, err := r.cli.CoreV1().ConfigMaps(r.cfg.Namespace).Create(cctx, r.buildSkillsConfigMap(id, archive), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("session %s: creating the ConfigMap of its skills: %w", id, err)
	}
	return nil
}
