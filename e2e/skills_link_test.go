package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// TestSkillSwappedForLink (K17): a skill folder swapped for a symbolic link
// to a host folder after the skills were loaded is refused at create, with
// the skill's name and why, in bind mode and in copy mode; the host folder's
// marker never shows in a sandbox. A create before the swap mounts the
// skill.
func TestSkillSwappedForLink(t *testing.T) {
	t.Parallel()
	for _, copyMode := range []bool{false, true} {
		name := map[bool]string{false: "bind", true: "copy"}[copyMode]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			root, host := filepath.Join(base, "root"), filepath.Join(base, "host")
			skill := filepath.Join(root, "okskill")
			require.NoError(t, os.MkdirAll(skill, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(skill, "SKILL.md"),
				[]byte("---\nname: okskill\ndescription: A skill.\n---\nbody\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(skill, "secret.txt"), []byte("SKILL-FILE\n"), 0o644))
			require.NoError(t, os.MkdirAll(host, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(host, "secret.txt"), []byte("HOST-ONLY-FILE-CONTENT\n"), 0o644))

			rt := newRuntime(t, func(o *sdocker.Options) { o.CopyAgent = copyMode })
			m := newManager(t, rt, sandbox.ManagerOptions{Skills: builtinSkills(t, root)}) // loaded here
			opts := sandbox.SessionOptions{Skills: []string{"okskill"}}

			s, err := m.Create(ctxT(t), opts)
			require.NoError(t, err)
			assert.Contains(t, sh(t, s, "cat /skills/okskill/secret.txt"), "SKILL-FILE")
			require.NoError(t, s.Close(ctxT(t)))

			require.NoError(t, os.Rename(skill, skill+".old"))
			require.NoError(t, os.Symlink(host, skill))
			s, err = m.Create(ctxT(t), opts)
			if err == nil {
				out := sh(t, s, "cat /skills/okskill/secret.txt")
				_ = s.Close(context.Background())
				t.Fatalf("the create was accepted; /skills/okskill/secret.txt in the sandbox reads %q", out)
			}
			require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
			require.ErrorContains(t, err, "skill okskill cannot be mounted: okskill is a symbolic link under its skill root")
			assert.NotContains(t, err.Error(), host, "no host path for the client")
			assert.Empty(t, m.List(), "nothing left of the refused create")
		})
	}
}
