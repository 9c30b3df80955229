package kubernetes

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/e2e/contract"
	"github.com/sandboxd/sandboxd/sandbox"
	skube "github.com/sandboxd/sandboxd/sandbox/kubernetes"
	"github.com/sandboxd/sandboxd/server/daemon"
	"github.com/sandboxd/sandboxd/skills"
)

// greetSkill is an executable skill whose script needs what its
// dependency installer puts on PATH; the installer counts its runs.
const greetSkill = `---
name: greet
description: Greets someone with a helper that its installer puts on PATH.
---

# Greet

## Usage

` + "```bash\n/skills/greet/scripts/greet.sh NAME\n```" + `

The installer is deps/install.sh.

## Parameters

### name (required, positional position 0)

**Type**: ` + "`str`" + `

Who to greet.
`

const greetInstaller = `#!/bin/sh
set -e
mkdir -p "$HOME/.local/bin"
echo run >> "$HOME/.greet-installs"
printf '#!/bin/sh\necho "hello, $1 (installs: $(wc -l < "$HOME/.greet-installs"))"\n' > "$HOME/.local/bin/greet-helper"
chmod +x "$HOME/.local/bin/greet-helper"
`

// skillRoot is an operator's skill root holding greetSkill, and a link to
// a folder outside it (never followed into the sandbox).
func skillRoot(t *testing.T) string {
	t.Helper()
	root, outside := t.TempDir(), t.TempDir()
	dir := filepath.Join(root, "greet")
	for p, c := range map[string]string{
		"SKILL.md":          greetSkill,
		"scripts/greet.sh":  "#!/bin/sh\nexec greet-helper \"$1\"\n",
		"deps/install.sh":   greetInstaller,
		"notes/more/far.md": "deep\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		mode := os.FileMode(0o644)
		if filepath.Ext(p) == ".sh" {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(c), mode))
	}
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("HOST-ONLY-FILE-CONTENT"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "out")))
	return root
}

// TestSkillsInPod: a session's skills reach its Pod through the ConfigMap
// and the init container, read-only for the session's user; load_skill and
// the skill's tool work over the real exec stream as on Docker, its
// installer runs once (skills_install: eager, at create), and a link in
// the folder is not carried. With both ways of bringing the agent: the
// skills' init container runs the agent binary from its volume.
func TestSkillsInPod(t *testing.T) {
	for _, vol := range []string{skube.AgentVolumeImage, skube.AgentVolumeInit} {
		t.Run(vol, func(t *testing.T) {
			t.Parallel()
			lib := skills.NewLibrary(skills.Root{Dir: skillRoot(t)})
			e := newEnvWith(t, false, vol, daemon.Skills{Lib: lib, Log: logger()})
			s, err := e.m.Create(ctxT(t), sandbox.SessionOptions{Skills: []string{"greet"}, SkillsInstall: sandbox.SkillsInstallEager})
			require.NoError(t, err)

			pod, err := e.cs.CoreV1().Pods(namespace).Get(ctxT(t), skube.PodName(s.ID()), metav1.GetOptions{})
			require.NoError(t, err)
			require.NotEmpty(t, pod.Status.InitContainerStatuses)
			last := pod.Status.InitContainerStatuses[len(pod.Status.InitContainerStatuses)-1]
			assert.Equal(t, "sandboxd-skills", last.Name)
			require.NotNil(t, last.State.Terminated)
			assert.Equal(t, int32(0), last.State.Terminated.ExitCode)

			obs, err := s.Call(ctxT(t), "load_skill", json.RawMessage(`{"name":"greet"}`), nil)
			require.NoError(t, err)
			require.False(t, obs.IsError, obs.Text())
			assert.Contains(t, obs.Text(), "Who to greet")
			assert.Contains(t, obs.Text(), "scripts/greet.sh")

			for range 2 {
				obs, err = s.Call(ctxT(t), "greet", json.RawMessage(`{"name":"kube"}`), nil)
				require.NoError(t, err)
				require.False(t, obs.IsError, obs.Text())
				assert.Contains(t, obs.Text(), "hello, kube (installs: 1)", "the installer ran once, at create")
			}

			out := contract.Sh(t, s, `ls -lR /skills; cat /skills/greet/notes/more/far.md; `+
				`touch /skills/greet/x 2>&1; echo "write=$?"; chmod u+w /skills/greet/SKILL.md 2>&1; echo "chmod=$?"; `+
				`ls /skills/greet/out 2>&1; cat /skills/greet/out/secret.txt 2>&1; true`)
			t.Log(out)
			assert.Contains(t, out, "deep")
			assert.Contains(t, out, "r-xr-xr-x", "scripts keep their execute bits")
			assert.Contains(t, out, "Read-only file system")
			assert.NotContains(t, out, "write=0")
			assert.NotContains(t, out, "chmod=0")
			assert.Contains(t, out, "No such file or directory", "the link is not carried")
			assert.NotContains(t, out, "HOST-ONLY-FILE-CONTENT")

			require.NoError(t, s.Close(ctxT(t)))
			_, err = e.cs.CoreV1().ConfigMaps(namespace).Get(ctxT(t), skube.PodName(s.ID()), metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "the ConfigMap goes with the session: %v", err)
		})
	}
}

// TestSkillsAdopted: a daemon that stops keeping its sessions, and starts
// again, adopts a session with skills as it is (the copy is in the Pod:
// the skill tool works, its installer does not run again), and removes
// the ConfigMap of a session whose Pod is gone (a crash between the two).
func TestSkillsAdopted(t *testing.T) {
	t.Parallel()
	lib := skills.NewLibrary(skills.Root{Dir: skillRoot(t)})
	e := newEnvWith(t, false, "", daemon.Skills{Lib: lib, Log: logger()})
	s, err := e.m.Create(ctxT(t), sandbox.SessionOptions{Skills: []string{"greet"}})
	require.NoError(t, err)
	obs, err := s.Call(ctxT(t), "greet", json.RawMessage(`{"name":"before"}`), nil)
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	assert.Contains(t, obs.Text(), "hello, before (installs: 1)")
	require.NoError(t, e.m.Shutdown(ctxT(t), true)) // as if the daemon stopped

	orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: skube.PodName("0rphan"), Namespace: namespace, Labels: map[string]string{}}}
	cm, err := e.cs.CoreV1().ConfigMaps(namespace).Get(ctxT(t), skube.PodName(s.ID()), metav1.GetOptions{})
	require.NoError(t, err)
	maps.Copy(orphan.Labels, cm.Labels)
	orphan.Labels[sandbox.LabelSession] = "0rphan"
	_, err = e.cs.CoreV1().ConfigMaps(namespace).Create(ctxT(t), orphan, metav1.CreateOptions{})
	require.NoError(t, err)

	m2 := e.daemon()
	adopted, err := m2.Get(s.ID())
	require.NoError(t, err, "adopted")
	obs, err = adopted.Call(ctxT(t), "greet", json.RawMessage(`{"name":"after"}`), nil)
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	assert.Contains(t, obs.Text(), "hello, after (installs: 1)", "the skill is there, and installed once")
	_, err = e.cs.CoreV1().ConfigMaps(namespace).Get(ctxT(t), orphan.Name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the orphan ConfigMap was reclaimed: %v", err)
	require.NoError(t, adopted.Close(ctxT(t)))
}
