package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

var (
	staticOnce sync.Once
	staticPath string
	staticErr  error
)

// staticBinary is a static sandboxd binary, as shipped: binPath when the
// tests run without -race (TestMain builds it with CGO off), else one built
// with CGO off beside it.
func staticBinary(t *testing.T) string {
	t.Helper()
	if !raceEnabled {
		return binPath
	}
	staticOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(binPath), "static")
		if staticErr = os.MkdirAll(dir, 0o755); staticErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			staticPath, staticErr = testenv.BuildBinary(ctx, dir)
		}
	})
	require.NoError(t, staticErr)
	return staticPath
}

func TestAgentImageRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "script")
	require.NoError(t, os.WriteFile(notELF, []byte("#!/bin/sh\necho hi\n"), 0o755))
	full := filepath.Join(dir, "full")
	require.NoError(t, os.MkdirAll(filepath.Join(full, "x"), 0o755))
	tarOut := filepath.Join(dir, "out.tar")
	cases := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"no output", nil, exitUsage, "give --tar FILE, --oci-layout DIR, or both"},
		{"extra args", []string{"--tar", tarOut, "x"}, exitUsage, "unexpected arguments: x"},
		{"tag without a tag", []string{"--tar", tarOut, "--tag", "sandboxd-agent"}, exitUsage, `"sandboxd-agent" has no tag`},
		{"tag upper case", []string{"--tar", tarOut, "--tag", "Agent:v1"}, exitUsage, "must be lowercase"},
		{"tag with digest", []string{"--tar", tarOut, "--tag", "agent:v1@sha256:" + strings.Repeat("a", 64)}, exitUsage, "names a digest"},
		{"layout not empty", []string{"--oci-layout", full}, exitUsage, "is not empty"},
		{"layout is a file", []string{"--oci-layout", notELF}, exitUsage, "not a directory"},
		{"binary missing", []string{"--tar", tarOut, "--binary", filepath.Join(dir, "nope")}, exitError, "reading the binary"},
		{"binary not ELF", []string{"--tar", tarOut, "--binary", notELF}, exitError, "is not an ELF executable"},
		// Debian's /bin/sh links libc: the image has none.
		{"binary dynamic", []string{"--tar", tarOut, "--binary", "/bin/sh"}, exitError, "is dynamically linked"},
		{"tar folder missing", []string{"--tar", filepath.Join(dir, "no", "out.tar"), "--binary", staticBinary(t)}, exitError, "writing the tarball"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI(append([]string{"agent-image"}, c.args...)...)
			assert.Equal(t, c.code, code, "stderr: %s", stderr)
			assert.Contains(t, stderr, c.err)
			assert.NoFileExists(t, tarOut, "a refused run wrote nothing")
		})
	}
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range left {
		assert.Contains(t, []string{"script", "full"}, e.Name(), "no temporary file left")
	}
}

// readTar returns the regular files of a tarball by name, failing on
// anything but files and folders.
func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		require.NoError(t, err)
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[h.Name] = b
		default:
			t.Fatalf("unexpected tar entry %s of type %c", h.Name, h.Typeflag)
		}
	}
}

// blob reads a blob by descriptor and checks its digest and size.
func blob(t *testing.T, files map[string][]byte, d ocispec.Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+d.Digest.Encoded()]
	require.True(t, ok, "blob %s missing", d.Digest)
	require.Equal(t, d.Digest, digest.FromBytes(b), "blob content matches its digest")
	require.Equal(t, d.Size, int64(len(b)))
	return b
}

// TestAgentImageContents reads the tarball and the layout back by the OCI
// and docker formats: one layer holding the binary as /sandboxd, the
// config, docker's manifest.json, the index naming the tag; and the same
// input gives the same bytes.
func TestAgentImageContents(t *testing.T) {
	bin := staticBinary(t)
	binData, err := os.ReadFile(bin)
	require.NoError(t, err)
	dir := t.TempDir()
	tarA, tarB, layoutDir := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar"), filepath.Join(dir, "layout")
	code, out, stderr := runCLI("agent-image", "--binary", bin, "--tag", "registry.example:5000/team/agent:v1", "--tar", tarA, "--oci-layout", layoutDir)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "wrote registry.example:5000/team/agent:v1 (sha256:")
	assert.Contains(t, out, "as an OCI layout in "+layoutDir)
	code, _, stderr = runCLI("agent-image", "--binary", bin, "--tag", "registry.example:5000/team/agent:v1", "--tar", tarB)
	require.Equal(t, exitOK, code, stderr)
	a, err := os.ReadFile(tarA)
	require.NoError(t, err)
	b, err := os.ReadFile(tarB)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(a, b), "the same binary and tag give the same tarball")

	files := readTar(t, bytes.NewReader(a))
	assert.JSONEq(t, `{"imageLayoutVersion":"1.0.0"}`, string(files["oci-layout"]))
	var index ocispec.Index
	require.NoError(t, json.Unmarshal(files["index.json"], &index))
	require.Len(t, index.Manifests, 1)
	desc := index.Manifests[0]
	assert.Equal(t, ocispec.MediaTypeImageManifest, desc.MediaType)
	assert.Equal(t, "v1", desc.Annotations[ocispec.AnnotationRefName])
	assert.Equal(t, "registry.example:5000/team/agent:v1", desc.Annotations["io.containerd.image.name"])
	assert.Contains(t, out, string(desc.Digest), "the digest printed is the manifest's")
	var man ocispec.Manifest
	require.NoError(t, json.Unmarshal(blob(t, files, desc), &man))
	assert.Equal(t, 2, man.SchemaVersion)
	require.Len(t, man.Layers, 1)
	assert.Equal(t, ocispec.MediaTypeImageLayerGzip, man.Layers[0].MediaType)
	assert.Equal(t, ocispec.MediaTypeImageConfig, man.Config.MediaType)

	var cfg ocispec.Image
	require.NoError(t, json.Unmarshal(blob(t, files, man.Config), &cfg))
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, "amd64", cfg.Architecture) // this machine's binary
	assert.Equal(t, []string{"/sandboxd"}, cfg.Config.Entrypoint)
	assert.Equal(t, "65534:65534", cfg.Config.User, "never root")
	assert.Contains(t, cfg.Config.Labels[ocispec.AnnotationVersion], "sandboxd ")

	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, man.Layers[0])))
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Equal(t, []digest.Digest{digest.FromBytes(raw)}, cfg.RootFS.DiffIDs, "diff_id is the uncompressed layer's digest")
	tr := tar.NewReader(bytes.NewReader(raw))
	h, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "sandboxd", h.Name)
	assert.Equal(t, int64(0o555), h.Mode)
	assert.Equal(t, 0, h.Uid)
	got, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(binData, got), "the layer holds the binary as given")
	_, err = tr.Next()
	assert.Equal(t, io.EOF, err, "the layer holds nothing else")

	var dm []dockerManifest
	require.NoError(t, json.Unmarshal(files["manifest.json"], &dm))
	require.Len(t, dm, 1)
	assert.Equal(t, []string{"registry.example:5000/team/agent:v1"}, dm[0].RepoTags)
	assert.Equal(t, "blobs/sha256/"+man.Config.Digest.Encoded(), dm[0].Config)
	assert.Equal(t, []string{"blobs/sha256/" + man.Layers[0].Digest.Encoded()}, dm[0].Layers)

	// The layout holds the same files but docker's manifest.json.
	for name, data := range files {
		if name == "manifest.json" {
			assert.NoFileExists(t, filepath.Join(layoutDir, name))
			continue
		}
		onDisk, err := os.ReadFile(filepath.Join(layoutDir, filepath.FromSlash(name)))
		if assert.NoError(t, err) {
			assert.True(t, bytes.Equal(data, onDisk), "layout file %s", name)
		}
	}
}

// TestAgentImageStdout writes the tarball to stdout, the message to stderr.
func TestAgentImageStdout(t *testing.T) {
	code, out, stderr := runCLI("agent-image", "--binary", staticBinary(t), "--tar", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "wrote sandboxd-agent:latest (sha256:")
	files := readTar(t, strings.NewReader(out))
	assert.Contains(t, files, "manifest.json")
	assert.Contains(t, files, "index.json")
}

// TestAgentImageDockerLoad loads the tarball into the real engine and runs
// the agent from it the way a Pod would (another non-root user, read-only
// root, no capabilities, no network); skopeo, where installed (make deps),
// reads the tarball and the layout as OCI.
func TestAgentImageDockerLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Docker engine; skipped with -short")
	}
	if err := exec.Command("docker", "version").Run(); err != nil {
		if os.Getenv("SANDBOXD_E2E_REQUIRE_IMAGES") != "" {
			t.Fatalf("no Docker engine: %v", err)
		}
		t.Skipf("no Docker engine: %v", err)
	}
	dir := t.TempDir()
	tarPath, layoutDir := filepath.Join(dir, "agent.tar"), filepath.Join(dir, "layout")
	tag := "sandboxd-agent-test:" + uuid.NewString()[:12]
	code, out, stderr := runCLI("agent-image", "--binary", staticBinary(t), "--tag", tag, "--tar", tarPath, "--oci-layout", layoutDir)
	require.Equal(t, exitOK, code, stderr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	docker := func(args ...string) string {
		t.Helper()
		b, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		require.NoError(t, err, "docker %s: %s", strings.Join(args, " "), b)
		return string(b)
	}
	assert.Contains(t, docker("load", "-i", tarPath), "Loaded image: "+tag)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "--force", tag).Run() })
	assert.Equal(t, "65534:65534 [/sandboxd] linux/amd64", strings.TrimSpace(docker("image", "inspect", "--format", "{{.Config.User}} {{.Config.Entrypoint}} {{.Os}}/{{.Architecture}}", tag)))

	got := docker("run", "--rm", "--label", "sandboxd.e2e.run=agent-image-test", "--user", "1000:1000", "--read-only",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--network", "none", tag)
	assert.True(t, strings.HasPrefix(got, "sandboxd "), "the image's default command is the agent's version: %q", got)
	assert.Contains(t, got, "linux/amd64")
	// The binary is the whole image: no shell to fall back to.
	b, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--label", "sandboxd.e2e.run=agent-image-test", "--entrypoint", "/bin/sh", tag, "-c", "true").CombinedOutput()
	require.Error(t, err, "a FROM-scratch image has no /bin/sh: %s", b)

	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Log("skopeo not installed (make deps installs it): OCI readers not checked")
		return
	}
	inspect := func(src string) string {
		t.Helper()
		b, err := exec.CommandContext(ctx, "skopeo", "inspect", "--format", "{{.Digest}} {{.Os}}/{{.Architecture}}", src).CombinedOutput()
		require.NoError(t, err, "skopeo inspect %s: %s", src, b)
		return strings.TrimSpace(string(b))
	}
	want := out[strings.Index(out, "(")+1 : strings.Index(out, ",")]
	assert.Equal(t, want+" linux/amd64", inspect("oci:"+layoutDir+":"+tag[strings.LastIndex(tag, ":")+1:]))
	assert.Equal(t, want+" linux/amd64", inspect("oci-archive:"+tarPath))
}
