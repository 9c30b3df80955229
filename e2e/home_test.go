package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// defaultImage is the default session image; tests that need it skip when
// the engine does not have it (`make image` builds it).
const defaultImage = sandbox.DefaultImage

// Images built by the suite, removed when it ends (see run).
var (
	builtMu     sync.Mutex
	builtImages []string
)

// buildImage builds a Dockerfile with no other context, with no network, and
// tags it for this run.
func buildImage(ctx context.Context, name, dockerfile string) (string, error) {
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		return "", err
	}
	if _, err := tw.Write([]byte(dockerfile)); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	tag := fmt.Sprintf("sandboxd-e2e-%s:%s", name, runID)
	resp, err := docker.ImageBuild(ctx, &ctxTar, build.ImageBuildOptions{
		Tags: []string{tag}, NetworkMode: "none", Remove: true, ForceRemove: true,
	})
	if err != nil {
		return "", fmt.Errorf("building %s: %w", tag, err)
	}
	defer resp.Body.Close()
	var log strings.Builder
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct{ Stream, Error string }
		err := dec.Decode(&msg)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && msg.Error != "" {
			err = errors.New(msg.Error)
		}
		if err != nil {
			return "", fmt.Errorf("building %s: %w\n%s", tag, err, log.String())
		}
		log.WriteString(msg.Stream)
	}
	builtMu.Lock()
	builtImages = append(builtImages, tag)
	builtMu.Unlock()
	return tag, nil
}

// removeBuiltImages removes what buildImage made, newest first.
func removeBuiltImages(ctx context.Context) {
	builtMu.Lock()
	defer builtMu.Unlock()
	for i := len(builtImages) - 1; i >= 0; i-- {
		if _, err := docker.ImageRemove(ctx, builtImages[i], image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: image left behind: %s: %v\n", builtImages[i], err)
		}
	}
	builtImages = nil
}

// foreignImages are images that are not sandboxd's: the test image with
// /workspace removed and /home/agent root-owned (mode 0750, a file in it),
// left with USER 0 like many task images; and one on top of it whose HOME is
// "/", as an image without a usable HOME. Built once for the suite.
var foreignImages = sync.OnceValues(func() ([2]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := buildImage(ctx, "noworkspace", "FROM "+testImage+"\nUSER 0\n"+
		"RUN rm -rf /workspace && echo seed > /home/agent/.seed && chown -R 0:0 /home/agent && chmod 0750 /home/agent\n")
	if err != nil {
		return [2]string{}, err
	}
	b, err := buildImage(ctx, "nohome", "FROM "+a+"\nENV HOME=/\n")
	return [2]string{a, b}, err
})

func foreignImage(t *testing.T, i int) string {
	t.Helper()
	imgs, err := foreignImages()
	require.NoError(t, err)
	return imgs[i]
}

// volumesOf lists a session's volumes by name.
func volumesOf(t *testing.T, id string) []string {
	t.Helper()
	vols, err := docker.VolumeList(ctxT(t), volume.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+id))})
	require.NoError(t, err)
	var names []string
	for _, v := range vols.Volumes {
		names = append(names, v.Name)
	}
	return names
}

// HOME is a volume of its own: writable on the read-only root, seeded from
// the image, removed with the session.
func TestHomeIsWritable(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	out := sh(t, s, `echo "home=$HOME"; stat -c 'owner=%u:%g' ~; mkdir -p ~/.cache/x && echo > ~/.cache/x/f && echo cache=ok; touch /etc/x 2>&1`)
	t.Log(out)
	assert.Contains(t, out, "home=/home/agent")
	assert.Contains(t, out, "owner=1000:1000")
	assert.Contains(t, out, "cache=ok")
	assert.Contains(t, out, "Read-only file system", "the root stays read-only")
	assert.ElementsMatch(t, []string{"sandboxd-" + s.ID() + "-workspace", "sandboxd-" + s.ID() + "-home"}, volumesOf(t, s.ID()))
	for _, mt := range containerOf(t, s.ID()).Mounts {
		if mt.Destination == "/home/agent" {
			assert.Equal(t, "volume", string(mt.Type))
			assert.True(t, mt.RW)
		}
	}
	require.NoError(t, s.Close(ctxT(t)))
	assert.Zero(t, sessionResources(t, s.ID()), "the home volume goes with the session")
}

// The default image: git's global config and caches under HOME work, and
// the image's home content is there.
func TestHomeInDefaultImage(t *testing.T) {
	t.Parallel()
	needImage(t, defaultImage)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: defaultImage}})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	out := sh(t, s, `git config --global user.name x && git config --global user.name && mkdir -p ~/.cache/x && echo cache=ok; `+
		`ls -a ~; python3 -c 'import site; print(site.getusersitepackages())'`)
	t.Log(out)
	assert.True(t, strings.HasPrefix(out, "x\n"), "git config --global wrote and read back")
	assert.Contains(t, out, "cache=ok")
	assert.Contains(t, out, ".bashrc", "the image's home content is kept")
	assert.Contains(t, out, ".gitconfig")
	out = sh(t, s, "mkdir -p $(python3 -c 'import site; print(site.getusersitepackages())') && echo usersite=ok")
	assert.Contains(t, out, "usersite=ok", "pip install --user has somewhere to go")
}

// The default image has what a coding agent reaches for (README, "What is
// in the default image"), usable in a session: read-only root, no network,
// the session user.
func TestDefaultImageTools(t *testing.T) {
	t.Parallel()
	needImage(t, defaultImage)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: defaultImage}})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	out := call(t, s, "terminal", map[string]any{"timeout": 300, "command": `for c in python pip curl cc gcc make less unzip jq file patch vi git rg; do command -v $c >/dev/null && echo "have $c" || echo "MISSING $c"; done; ` +
		`python -c 'print("python=" + __import__("sys").version.split()[0])'; ` +
		`printf '#include <stdio.h>\nint main(void){puts("compiled=ok");return 0;}\n' > /workspace/t.c && cc -o /workspace/t /workspace/t.c && /workspace/t; ` +
		`python -m venv /workspace/venv && /workspace/venv/bin/pip --version >/dev/null && echo venv=ok; ` +
		`printf 'a\n' > /workspace/p && printf -- '--- p\n+++ p\n@@ -1 +1 @@\n-a\n+b\n' | patch -s /workspace/p && cat /workspace/p`}) // venv's ensurepip takes seconds
	t.Log(out)
	assert.NotContains(t, out, "MISSING")
	assert.Contains(t, out, "python=3.")
	assert.Contains(t, out, "compiled=ok")
	assert.Contains(t, out, "venv=ok")
	assert.Contains(t, out, "\nb\n")
}

// An image that is not sandboxd's, without /workspace, root-owned home,
// running as root: the session user still owns the workspace and HOME; the
// home's content and mode are kept; no helper is left behind.
func TestForeignImageOwnership(t *testing.T) {
	t.Parallel()
	img := foreignImage(t, 0)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: img}})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	out := sh(t, s, `id -u; touch /workspace/f && echo ws=ok; stat -c 'ws=%u:%g %a' /workspace; `+
		`echo "home=$HOME"; stat -c 'home=%u:%g %a' ~; cat ~/.seed; touch ~/.x && echo home=ok`)
	t.Log(out)
	assert.True(t, strings.HasPrefix(out, "1000\n"), out)
	assert.Contains(t, out, "ws=ok")
	assert.Contains(t, out, "ws=1000:1000 755")
	assert.Contains(t, out, "home=/home/agent")
	assert.Contains(t, out, "home=1000:1000 750", "owner handed over, mode kept")
	assert.Contains(t, out, "seed", "content kept")
	assert.Contains(t, out, "home=ok")
	info := containerOf(t, s.ID()) // exactly one container: the helper is gone
	assert.True(t, info.HostConfig.ReadonlyRootfs)
	require.NoError(t, s.Close(ctxT(t)))
	assert.Zero(t, sessionResources(t, s.ID()))

	// Another session user gets them too.
	s, err = m.Create(ctxT(t), sandbox.SessionOptions{User: "2345:2346"})
	require.NoError(t, err)
	out = sh(t, s, `id -u; stat -c '%u:%g' /workspace ~; touch /workspace/f ~/f && echo wrote`)
	assert.Contains(t, out, "2345\n2345:2346\n2345:2346\nwrote", out)
}

// An image whose HOME is unusable ("/") gets sandboxd's fallback home.
func TestImageWithoutHome(t *testing.T) {
	t.Parallel()
	img := foreignImage(t, 1)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: img}})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	out := sh(t, s, `echo "home=$HOME"; stat -c '%u:%g' ~; mkdir -p ~/.cache/x && echo cache=ok; touch /workspace/f && echo ws=ok`)
	t.Log(out)
	assert.Contains(t, out, "home="+sandbox.FallbackHome+"\n1000:1000")
	assert.Contains(t, out, "cache=ok")
	assert.Contains(t, out, "ws=ok")
}

// Warm sandboxes of a foreign image are fixed before they are pooled, and a
// restarted daemon adopts a session with its home intact.
func TestForeignImagePoolAndAdoption(t *testing.T) {
	img := foreignImage(t, 0)
	rt := newRuntime(t)
	ctx := ctxT(t)
	opts := sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: img, Runtime: e2eRuntime}, Logger: logger(),
		Pools: []sandbox.PoolOptions{{Size: 1}}}
	m1, err := sandbox.NewManager(ctx, rt, opts)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m1.Pools()[0].Ready == 1 }, time.Minute, 20*time.Millisecond)
	s, err := m1.Create(ctx, sandbox.SessionOptions{})
	require.NoError(t, err)
	sh(t, s, "echo kept > ~/marker && touch /workspace/f")
	require.NoError(t, m1.Shutdown(ctx, true))

	opts.Pools = nil
	m2 := newManager(t, rt, opts)
	s, err = m2.Get(s.ID())
	require.NoError(t, err, "adopted")
	assert.Contains(t, sh(t, s, "cat ~/marker; ls /workspace"), "kept\nf")
	require.NoError(t, s.Close(ctx))
	assert.Zero(t, sessionResources(t, s.ID()))
}

// WritableRootfs leaves the root writable where the image lets the session
// user write; it grants nothing else.
func TestWritableRootfs(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{WritableRootfs: true})
	require.NoError(t, err)
	assert.False(t, containerOf(t, s.ID()).HostConfig.ReadonlyRootfs)
	out := sh(t, s, "touch /var/tmp/x && echo vartmp=ok; touch /etc/x 2>&1; id -u")
	t.Log(out)
	assert.Contains(t, out, "vartmp=ok")
	assert.Contains(t, out, "Permission denied", "root-owned folders stay closed")
	assert.Contains(t, out, "1000")

	_, err = m.Create(ctxT(t), sandbox.SessionOptions{WritableRootfs: true, Limits: sandbox.Limits{Disk: 32 << 20}})
	assert.ErrorIs(t, err, sandbox.ErrInvalidOptions)
}
