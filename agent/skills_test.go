package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/skill"
)

func TestInstallSkillsWithoutSkillsSucceeds(t *testing.T) {
	p := newPair(t)
	require.NoError(t, p.cli.InstallSkills(ctxT(t)))
}

// skills/install runs the skills' installers through the executor's
// InstallAll; a failure reaches the host as ErrSkillInstall with the
// executor's words (the skill, its installer, the exit status).
func TestInstallSkillsRunsTheInstallers(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	mk := func(path, installer string) *skills.Skill {
		dir := filepath.Join(root, path)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "deps"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: "+path+"\ndescription: d\n---\nbody\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "deps", "install.sh"), []byte(installer), 0o755))
		return &skills.Skill{Path: path, Name: path, Description: "d", Dir: dir, Installer: "deps/install.sh"}
	}
	ok := mk("ok", "touch \"$SKILL_DIR/../ok-installed\"\n")
	bad := mk("bad", "echo 'no network' >&2\nexit 4\n")
	x, err := skill.New(skill.Options{Dir: root, Skills: []*skills.Skill{ok, bad}, Workspace: t.TempDir(), StateDir: state, Logger: quiet})
	require.NoError(t, err)
	made, warnings := x.Tools()
	require.Empty(t, warnings)
	ts, err := tools.NewToolset(made...)
	require.NoError(t, err)
	p := newPair(t, func(o *ServerOptions) { o.Toolset = ts })
	t.Cleanup(func() { _ = ts.Close() })

	err = p.cli.InstallSkills(ctxT(t))
	require.ErrorIs(t, err, proto.ErrSkillInstall)
	var we *proto.Error
	require.ErrorAs(t, err, &we)
	assert.Equal(t, proto.CodeSkillInstall, we.Code)
	assert.Contains(t, err.Error(), `Skill "bad" cannot be used in this session: its dependency installer deps/install.sh exited with code 4.`)
	assert.Contains(t, err.Error(), "no network")
	assert.FileExists(t, filepath.Join(root, "ok-installed"))
}

// A cancelled skills/install is cancelled, not a failed installer.
func TestInstallSkillsCancelled(t *testing.T) {
	waiting := make(chan struct{})
	inst := &blockingInstaller{started: waiting}
	tool, err := tools.NewFunc(tools.Definition{Name: "x", Description: "x"}, func(context.Context, noArgs) (*tools.Observation, error) {
		return tools.TextResult("", nil), nil
	}, inst)
	require.NoError(t, err)
	ts, err := tools.NewToolset(tool)
	require.NoError(t, err)
	p := newPair(t, func(o *ServerOptions) { o.Toolset = ts })
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() { <-waiting; cancel() }()
	err = p.cli.InstallSkills(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, proto.ErrSkillInstall)
}

type blockingInstaller struct{ started chan struct{} }

func (b *blockingInstaller) Close() error { return nil }
func (b *blockingInstaller) InstallAll(ctx context.Context) error {
	close(b.started)
	<-ctx.Done()
	return errors.New("stopped")
}
