package kubernetes

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes/skilltar"
)

func skillRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "hello", "scripts")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello", "SKILL.md"), []byte("---\nname: hello\ndescription: d\n---\nbody\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hello.sh"), []byte("#!/bin/sh\necho hello\n"), 0o755))
	return root
}

// TestStartWithSkills: a session's skills travel as an immutable ConfigMap
// of the session's name holding their archive; the Pod unpacks it with an
// init container into the volume its container mounts read-only at
// /skills; List reports the ConfigMap with the session's, and Remove
// deletes it.
func TestStartWithSkills(t *testing.T) {
	cs := newClientset()
	runPods(t, cs)
	r := newTestRuntime(t, cs, &fakeAgent{}, nil)
	root := skillRoot(t)
	spec := testSpec(t, testSession, sandbox.SessionOptions{Skills: []string{"hello"}}, "")
	spec.Skills = []sandbox.SkillMount{{Path: "hello", Source: filepath.Join(root, "hello")}}
	rwc, err := r.Start(t.Context(), spec)
	require.NoError(t, err)
	defer rwc.Close()

	cm, err := cs.CoreV1().ConfigMaps(testNS).Get(t.Context(), PodName(testSession), metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, *cm.Immutable)
	assert.Equal(t, testSession, cm.Labels[sandbox.LabelSession])
	dst := t.TempDir()
	require.NoError(t, skilltar.Unpack(bytes.NewReader(cm.BinaryData[skillsKey]), dst))
	t.Cleanup(func() {
		_ = filepath.Walk(dst, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) })
	})
	b, err := os.ReadFile(filepath.Join(dst, "hello", "scripts", "hello.sh"))
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\necho hello\n", string(b))

	pod, err := cs.CoreV1().Pods(testNS).Get(t.Context(), PodName(testSession), metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, pod.Spec.InitContainers, 1)
	ic := pod.Spec.InitContainers[0]
	assert.Equal(t, []string{sandbox.AgentPath, "skills-unpack", skillsSrcDir + "/" + skillsKey, sandbox.SkillsDir}, ic.Command)
	assert.Equal(t, pod.Spec.Containers[0].Image, ic.Image)
	assert.Contains(t, pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: volSkills, MountPath: sandbox.SkillsDir, ReadOnly: true})

	res, err := r.List(t.Context())
	require.NoError(t, err)
	kinds := map[sandbox.ResourceKind]int{}
	for _, x := range res {
		kinds[x.Kind]++
		assert.Equal(t, testSession, x.SessionID)
	}
	assert.Equal(t, map[sandbox.ResourceKind]int{sandbox.KindContainer: 1, sandbox.KindNetwork: 1, sandbox.KindVolume: 1}, kinds)

	require.NoError(t, rwc.Close())
	require.NoError(t, r.Remove(t.Context(), testSession))
	assertNothingLeft(t, r)
}

// TestSkillsRefused: skills above the ConfigMap's bound, or a folder that
// became a link since the loader read it, refuse the session with an
// options error naming the skill, before anything is made.
func TestSkillsRefused(t *testing.T) {
	root := skillRoot(t)
	big := make([]byte, MaxSkillsArchive+1) // random: gzip does not shrink it
	_, _ = rand.Read(big)
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello", "data.bin"), big, 0o644))
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "SKILL.md"), []byte("HOST-ONLY"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "linked")))
	for _, tc := range []struct {
		name, path, want string
	}{
		{"too big", "hello", "KiB compressed"},
		{"linked folder", "linked", "skill linked cannot be copied into the sandbox: linked is not a directory (a symbolic link)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newClientset()
			r := newTestRuntime(t, cs, &fakeAgent{}, nil)
			spec := testSpec(t, testSession, sandbox.SessionOptions{Skills: []string{tc.path}}, "")
			spec.Skills = []sandbox.SkillMount{{Path: tc.path, Source: filepath.Join(root, tc.path)}}
			before := len(cs.Actions())
			_, err := r.Start(t.Context(), spec)
			var oe *sandbox.OptionsError
			require.ErrorAs(t, err, &oe)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), root)
			assert.Len(t, cs.Actions(), before, "Start made API calls: %v", cs.Actions()[before:])
		})
	}
}

// TestOldRoleWithoutConfigMaps: a Role from before skills (no configmaps
// verbs) still lists and removes sessions: the ConfigMaps it could not
// have made are not looked for.
func TestOldRoleWithoutConfigMaps(t *testing.T) {
	cs := newClientset()
	for _, verb := range []string{"list", "delete"} {
		cs.PrependReactor(verb, "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("RBAC: not allowed"))
		})
	}
	runPods(t, cs)
	r := newTestRuntime(t, cs, &fakeAgent{}, nil)
	rwc, err := r.Start(t.Context(), testSpec(t, testSession, sandbox.SessionOptions{}, ""))
	require.NoError(t, err)
	res, err := r.List(t.Context())
	require.NoError(t, err)
	assert.Len(t, res, 2)
	require.NoError(t, rwc.Close())
	require.NoError(t, r.Remove(t.Context(), testSession))
}
