package kubeapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes"
	"github.com/sandboxd/sandboxd/server/daemon"
	"github.com/sandboxd/sandboxd/skills"
)

// TestSkillsThroughAPIServer: a session's skills pass the real API
// server's validation (an immutable ConfigMap with the archive as
// binaryData; a Pod with a configMap volume and the unpacking init
// container, admitted under Pod Security restricted), the node unpacks
// them from the ConfigMap as the API server stores it, the skill runs as
// a tool, and closing the session deletes the ConfigMap.
func TestSkillsThroughAPIServer(t *testing.T) {
	ns := newNamespace(t, true)
	node := startNode(t, ns)
	root := t.TempDir()
	dir := filepath.Join(root, "shout", "scripts")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "shout", "SKILL.md"), []byte("---\nname: shout\ndescription: Says a word loudly.\n---\n\n"+
		"# Shout\n\n## Usage\n\n```bash\n/skills/shout/scripts/shout.sh WORD\n```\n\n## Parameters\n\n### word (required, positional position 0)\n\n**Type**: `str`\n\nThe word.\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shout.sh"), []byte("#!/bin/sh\necho \"$1\" | tr a-z A-Z\n"), 0o755))
	m := newManager(t, newRuntime(t, kube.client, ns, node.Name()), sandbox.ManagerOptions{
		Skills: daemon.Skills{Lib: skills.NewLibrary(skills.Root{Dir: root}), Log: logger()},
	})
	ctx := testContext(t)
	s, err := m.Create(ctx, sandbox.SessionOptions{Skills: []string{"shout"}})
	require.NoError(t, err)

	cm, err := kube.client.CoreV1().ConfigMaps(ns).Get(ctx, kubernetes.PodName(s.ID()), metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, cm.Immutable)
	assert.True(t, *cm.Immutable)
	obs, err := s.Call(ctx, "shout", json.RawMessage(`{"word":"kubernetes"}`), nil)
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	assert.Contains(t, obs.Text(), "KUBERNETES")
	assert.Contains(t, terminal(t, s, "touch /skills/shout/x 2>&1; true"), "Read-only file system")

	require.NoError(t, m.Close(ctx, s.ID()))
	nothingLeft(t, ns)
}
