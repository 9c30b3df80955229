package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// systemPATH is the PATH of the shell_init images: the task image's
// without its /opt/venv/bin, so only the rc file can put a venv first.
const systemPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// shellInitImages are two SWE-bench-shaped images on the task image, USER
// root, whose environment only root's ~/.bashrc activates:
//   - rcvenv: the task image's venv at /opt/venv (pip included), taken off
//     PATH and activated by `. /opt/venv/bin/activate` in root's
//     ~/.bashrc; HOME /root as the task image sets it;
//   - conda: a conda-style /opt/conda/etc/profile.d/conda.sh (a function
//     `conda` whose `activate` exports CONDA_PREFIX and PATH, as conda's
//     does) and a venv without pip as the env at /opt/conda/envs/testbed
//     (made in a second; pip's own install takes minutes on a loaded
//     machine), activated as
//     SWE-bench does: `source .../conda.sh && conda activate testbed`;
//     HOME emptied, as SWE-bench images set none.
//
// Built once for the suite, FROM the task image (USER root already), with
// no network, in two instructions each: the classic builder commits a
// container per instruction, which took minutes at load 30-150 here.
var shellInitImages = sync.OnceValues(func() ([2]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	venv, err := buildImage(ctx, "rcvenv", "FROM "+taskImage+"\n"+
		"RUN echo '. /opt/venv/bin/activate' >> /root/.bashrc\n"+
		"ENV PATH="+systemPATH+"\n")
	if err != nil {
		return [2]string{}, err
	}
	condaSh := `conda() {
  case "$1" in
    activate) export CONDA_PREFIX="/opt/conda/envs/$2" CONDA_DEFAULT_ENV="$2"; export PATH="$CONDA_PREFIX/bin:$PATH"; PS1="($2) ${PS1:-}";;
    *) echo "conda: only activate here" >&2; return 1;;
  esac
}
`
	// One Dockerfile line: printf's format carries the newlines.
	format := strings.NewReplacer(`\`, `\\`, "%", "%%", "\n", `\n`).Replace(condaSh)
	conda, err := buildImage(ctx, "conda", "FROM "+taskImage+"\n"+
		"RUN mkdir -p /opt/conda/etc/profile.d && printf "+shellQuoteE2E(format)+" > /opt/conda/etc/profile.d/conda.sh && "+
		"python3 -m venv --without-pip /opt/conda/envs/testbed && "+
		"echo 'source /opt/conda/etc/profile.d/conda.sh && conda activate testbed' > /root/.bashrc\n"+
		"ENV PATH="+systemPATH+" HOME=\n")
	if err != nil {
		return [2]string{}, err
	}
	return [2]string{venv, conda}, nil
})

func shellQuoteE2E(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func needShellInitImages(t *testing.T) (venv, conda string) {
	t.Helper()
	needImage(t, taskImage)
	imgs, err := shellInitImages()
	require.NoError(t, err)
	return imgs[0], imgs[1]
}

// pyProbe prints which python and pip the terminal's shell runs, and the
// interpreter's prefix.
const pyProbe = `command -v python pip; python -c 'import sys; print("prefix=" + sys.prefix)'; pip --version | sed 's/^pip [^ ]* from //; s/ (python.*//'`

// shell_init: image in the hardened mode: root's ~/.bashrc activates the
// venv, so `python` and `pip` are the venv's (without the key they are
// the system's), pip installs into it, and the terminal works as ever
// (its directory is the image's WORKDIR, a reset reads the rc again).
func TestShellInitVenvFromBashrc(t *testing.T) {
	t.Parallel()
	venv, _ := needShellInitImages(t)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})

	plain, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: venv})
	require.NoError(t, err)
	out := sh(t, plain, pyProbe)
	t.Logf("without shell_init:\n%s", out)
	assert.True(t, strings.HasPrefix(out, "/usr/bin/python\n"), "the system's python without the key: %s", out)
	require.NoError(t, plain.Close(ctxT(t)))

	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: venv, ShellInit: sandbox.ShellInitImage,
		EditablePaths: []string{"/testbed", "/opt/venv"}})
	require.NoError(t, err)
	out = sh(t, s, pyProbe+`; echo "VIRTUAL_ENV=$VIRTUAL_ENV home=$HOME"; id -u; pwd`)
	t.Logf("with shell_init: image:\n%s", out)
	assert.True(t, strings.HasPrefix(out, "/opt/venv/bin/python\n/opt/venv/bin/pip\nprefix=/opt/venv\n/opt/venv/lib/python3"), out)
	assert.Contains(t, out, "VIRTUAL_ENV=/opt/venv home=/root\n1000\n/testbed\n")
	assert.Contains(t, out, "[Python interpreter: /opt/venv/bin/python]")
	assert.NotContains(t, out, "(venv)", "the activate script's prompt never shows")

	out = shLong(t, s, `pip install -q --no-index --no-deps --no-build-isolation --disable-pip-version-check -e /testbed >/tmp/pip.log 2>&1; echo "pip=$?"; `+
		`python -c 'import calc, sys; print(calc.__file__)'; tail -n 3 /tmp/pip.log`)
	t.Log(out)
	assert.Contains(t, out, "pip=0\n/testbed/calc/__init__.py\n", "pip installs into the venv the rc file activated")

	out = call(t, s, "terminal", map[string]any{"command": "echo $VIRTUAL_ENV; pwd", "reset": true})
	assert.Contains(t, out, "/opt/venv\n/testbed\n", "a reset reads the rc file again")
}

// A conda-style activation as SWE-bench images make it (`source
// conda.sh && conda activate testbed` in root's ~/.bashrc, no HOME in the
// image): as the image's user it applies; in the hardened mode root's
// home is unreadable to uid 1000, and the terminal says so naming
// shell_init and what to set, until the session's HOME is root's (its home
// volume then holds a copy of it, the session user's).
func TestShellInitCondaStyle(t *testing.T) {
	t.Parallel()
	_, conda := needShellInitImages(t)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	const probe = `command -v python; python -c 'import sys; print("prefix=" + sys.prefix)'; echo "env=$CONDA_DEFAULT_ENV fn=$(type -t conda)"`
	const want = "/opt/conda/envs/testbed/bin/python\nprefix=/opt/conda/envs/testbed\n"

	t.Run("image user", func(t *testing.T) {
		t.Parallel()
		s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: conda, ShellInit: sandbox.ShellInitImage,
			User: sandbox.UserImage, WritableRootfs: true})
		require.NoError(t, err)
		out := sh(t, s, probe)
		t.Log(out)
		assert.True(t, strings.HasPrefix(out, want), out)
		assert.Contains(t, out, "env=testbed fn=function\n")
	})

	t.Run("hardened, root's home unreadable", func(t *testing.T) {
		t.Parallel()
		s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: conda, ShellInit: sandbox.ShellInitImage})
		require.NoError(t, err)
		raw, _ := json.Marshal(map[string]any{"command": "python -V"})
		obs, err := s.Call(ctxT(t), "terminal", raw, nil)
		require.NoError(t, err)
		t.Log(obs.Text())
		assert.True(t, obs.IsError, "a silent system python is what the key exists to avoid")
		for _, w := range []string{"The terminal could not start", "shell_init: image", "/root/.bashrc", "cannot be read by the session user (uid 1000)", "HOME: /root"} {
			assert.Contains(t, obs.Text(), w)
		}
	})

	t.Run("hardened, HOME set to root's", func(t *testing.T) {
		t.Parallel()
		s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: conda, ShellInit: sandbox.ShellInitImage,
			Env: map[string]string{"HOME": "/root"}, EditablePaths: []string{"/opt/conda"}})
		require.NoError(t, err)
		out := sh(t, s, probe+"; id -u; stat -c %u /root/.bashrc")
		t.Log(out)
		assert.True(t, strings.HasPrefix(out, want), out)
		assert.Contains(t, out, "env=testbed fn=function\n1000\n1000\n")
	})
}
