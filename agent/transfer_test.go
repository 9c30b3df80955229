package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// makeTree builds a source tree with what an upload must keep: nested
// dirs, modes, a relative symlink, an empty dir, a read-only dir, and a
// file larger than a frame.
func makeTree(t *testing.T, bigSize int) string {
	t.Helper()
	src := t.TempDir()
	write := func(name string, data []byte, mode fs.FileMode) {
		p := filepath.Join(src, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, data, mode))
		require.NoError(t, os.Chmod(p, mode))
	}
	write("a/b/c.txt", []byte("hello\n"), 0o644)
	write("bin/run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
	write("secret", []byte("s"), 0o600)
	big := make([]byte, bigSize)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(big)
	write("big.bin", big, 0o644)
	require.NoError(t, os.Symlink("a/b/c.txt", filepath.Join(src, "link")))
	require.NoError(t, os.Mkdir(filepath.Join(src, "empty"), 0o700))
	write("ro/inside.txt", []byte("x"), 0o444)
	require.NoError(t, os.Chmod(filepath.Join(src, "ro"), 0o555))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(src, "ro"), 0o755) }) // so TempDir can remove it
	return src
}

// treeSummary describes a tree: type, mode, content hash or link target.
func treeSummary(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			require.NoError(t, err)
			out[rel] = "link -> " + target
		case fi.IsDir():
			out[rel] = "dir " + fi.Mode().Perm().String()
		default:
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			sum := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("%v %d bytes %x", fi.Mode().Perm(), len(data), sum[:8])
		}
		return nil
	}))
	return out
}

// tarTree makes a tar of dir's contents (entries relative to dir), with GNU
// tar when the machine has it (what real hosts send), else our own writer.
func tarTree(t *testing.T, dir string) []byte {
	t.Helper()
	if _, err := exec.LookPath("tar"); err == nil {
		out, err := exec.Command("tar", "-C", dir, "-cf", "-", ".").Output()
		require.NoError(t, err)
		return out
	}
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer func() { _ = root.Close() }()
	var buf bytes.Buffer
	require.NoError(t, writeTar(&buf, root, ".", "."))
	return buf.Bytes()
}

func TestUploadDownloadRoundTrip(t *testing.T) {
	t.Parallel() // the slowest test here (a >32 MiB file, three transfers): overlap it with the rest
	p := newPair(t)
	// Three transfers of >32 MiB under -race: 30 s (ctxT) was hit twice on a
	// loaded 2-core machine; the bound is against a hang, not a speed.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src := makeTree(t, proto.MaxFrameSize+3*proto.ChunkSize+17) // crosses the frame limit and chunk edges
	want := treeSummary(t, src)
	archive := tarTree(t, src)

	res, err := p.cli.UploadResult(ctx, "dest", bytes.NewReader(archive))
	require.NoError(t, err)
	assert.Equal(t, 5, res.Files)
	assert.Equal(t, 1, res.Links)
	assert.EqualValues(t, proto.MaxFrameSize+3*proto.ChunkSize+17+6+18+1+1, res.Bytes)
	dest := filepath.Join(p.ws, "dest")
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dest, "ro"), 0o755) }) // so TempDir can remove it
	assert.Equal(t, want, treeSummary(t, dest))

	// Upload again over the same place: files (even read-only ones) are
	// replaced, directories merged.
	require.NoError(t, p.cli.Upload(ctx, filepath.Join(p.ws, "dest"), bytes.NewReader(archive)))
	assert.Equal(t, want, treeSummary(t, dest))

	// Download the directory: the top entry is its base name.
	var got bytes.Buffer
	require.NoError(t, p.cli.Download(ctx, "/"+strings.TrimPrefix(dest, "/"), &got))
	out := t.TempDir()
	outRoot, err := os.OpenRoot(out)
	require.NoError(t, err)
	defer func() { _ = outRoot.Close() }()
	_, err = extractTar(outRoot, &got, extractLimits{workspace: out, destRel: "."})
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(out, "dest", "ro"), 0o755) }) // so TempDir can remove it
	assert.Equal(t, want, treeSummary(t, filepath.Join(out, "dest")))

	// A single file.
	got.Reset()
	require.NoError(t, p.cli.Download(ctx, "dest/bin/run.sh", &got))
	tr := tar.NewReader(&got)
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "run.sh", hdr.Name)
	assert.EqualValues(t, 0o755, hdr.Mode)
	body, _ := io.ReadAll(tr)
	assert.Equal(t, "#!/bin/sh\necho hi\n", string(body))
	_, err = tr.Next()
	assert.Equal(t, io.EOF, err)

	assertNoTransfers(t, p.srv)
}

type entry struct {
	name, link string
	typ        byte
	body       string
}

func tarOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body)), ModTime: time.Now()}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func TestUploadRefusesEscapes(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	outside := t.TempDir() // nothing may ever appear here
	require.NoError(t, os.Symlink(outside, filepath.Join(p.ws, "abs-out")))
	rel, err := filepath.Rel(p.ws, outside)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(rel, filepath.Join(p.ws, "rel-out")))

	cases := []struct {
		name, dest string
		archive    []byte
		want       error
		text       string
	}{
		{"dot-dot entry", "d", tarOf(t, entry{name: "../evil", typ: tar.TypeReg, body: "x"}), proto.ErrBadArchive, `entry "../evil" leads outside`},
		{"nested dot-dot", "d", tarOf(t, entry{name: "a/../../evil", typ: tar.TypeReg, body: "x"}), proto.ErrBadArchive, "leads outside"},
		{"absolute entry", "d", tarOf(t, entry{name: "/tmp/evil", typ: tar.TypeReg, body: "x"}), proto.ErrBadArchive, "absolute name"},
		{"absolute symlink out", "d", tarOf(t, entry{name: "l", typ: tar.TypeSymlink, link: "/etc"}), proto.ErrOutsideWorkspace, `symlink "l" points to "/etc"`},
		{"relative symlink out", "d", tarOf(t, entry{name: "x/l", typ: tar.TypeSymlink, link: "../../../etc"}), proto.ErrOutsideWorkspace, "outside the workspace"},
		{"symlink then write through it", "d", tarOf(t,
			entry{name: "l", typ: tar.TypeSymlink, link: outside},
			entry{name: "l/evil", typ: tar.TypeReg, body: "x"}), proto.ErrOutsideWorkspace, ""},
		{"hard link out", "d", tarOf(t, entry{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}), proto.ErrBadArchive, "leads outside"},
		{"char device", "d", tarOf(t, entry{name: "null", typ: tar.TypeChar}), proto.ErrBadArchive, "device file or FIFO"},
		{"fifo", "d", tarOf(t, entry{name: "p", typ: tar.TypeFifo}), proto.ErrBadArchive, "device file or FIFO"},
		{"through an existing absolute symlink", ".", tarOf(t, entry{name: "abs-out/evil", typ: tar.TypeReg, body: "x"}), proto.ErrOutsideWorkspace, ""},
		{"through an existing relative symlink", ".", tarOf(t, entry{name: "rel-out/evil", typ: tar.TypeReg, body: "x"}), proto.ErrOutsideWorkspace, ""},
		{"dest through a symlink", "rel-out/sub", tarOf(t, entry{name: "f", typ: tar.TypeReg, body: "x"}), proto.ErrOutsideWorkspace, ""},
		{"dest outside", "../x", tarOf(t, entry{name: "f", typ: tar.TypeReg, body: "x"}), proto.ErrOutsideWorkspace, "is not under the workspace"},
		{"absolute dest outside", "/etc", tarOf(t, entry{name: "f", typ: tar.TypeReg, body: "x"}), proto.ErrOutsideWorkspace, "is not under the workspace"},
		{"empty dest", "", tarOf(t, entry{name: "f", typ: tar.TypeReg, body: "x"}), proto.ErrInvalidParams, "path is empty"},
		{"not a tar", "d", bytes.Repeat([]byte("garbage!"), 200), proto.ErrBadArchive, ""},
		{"truncated", "d", tarOf(t, entry{name: "f", typ: tar.TypeReg, body: strings.Repeat("x", 5000)})[:2000], proto.ErrBadArchive, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := p.cli.Upload(ctx, c.dest, bytes.NewReader(c.archive))
			require.ErrorIs(t, err, c.want)
			assert.Contains(t, err.Error(), c.text)
			left, rerr := os.ReadDir(outside)
			require.NoError(t, rerr)
			assert.Empty(t, left, "nothing is written outside the workspace")
		})
	}
	_, err = os.Stat(filepath.Join(filepath.Dir(p.ws), "evil"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, p.cli.Ping(ctx))
	assertNoTransfers(t, p.srv)

	// A symlink to elsewhere inside the workspace is fine.
	require.NoError(t, p.cli.Upload(ctx, "ok/deep", bytes.NewReader(tarOf(t,
		entry{name: "up", typ: tar.TypeSymlink, link: "../../d"},
		entry{name: "abs", typ: tar.TypeSymlink, link: filepath.Join(p.ws, "d")}))))
}

func TestDownloadErrors(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(p.ws, "out")))
	var buf bytes.Buffer
	err := p.cli.Download(ctx, "missing", &buf)
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), filepath.Join(p.ws, "missing"))
	require.ErrorIs(t, p.cli.Download(ctx, "/etc/passwd", &buf), proto.ErrOutsideWorkspace)
	require.ErrorIs(t, p.cli.Download(ctx, "out/secret", &buf), proto.ErrOutsideWorkspace)
	assert.Zero(t, buf.Len())

	// The symlink itself is downloadable: as a link, not its target.
	require.NoError(t, p.cli.Download(ctx, "out", &buf))
	hdr, err := tar.NewReader(&buf).Next()
	require.NoError(t, err)
	assert.Equal(t, byte(tar.TypeSymlink), hdr.Typeflag)
	assert.Equal(t, outside, hdr.Linkname)
	assertNoTransfers(t, p.srv)
}

func TestTransferProtocolMisuse(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	_, err := p.request(t).roundTrip(ctx, proto.MethodUploadChunk, proto.ChunkParams{Transfer: "up-999", Seq: 1, Data: []byte("x")})
	require.ErrorIs(t, err, proto.ErrUnknownTransfer)
	_, err = p.request(t).roundTrip(ctx, proto.MethodDownloadRd, proto.TransferParams{Transfer: "nope"})
	require.ErrorIs(t, err, proto.ErrUnknownTransfer)

	raw, err := p.request(t).roundTrip(ctx, proto.MethodUploadBegin, proto.PathParams{Path: "x"})
	require.NoError(t, err)
	id := strings.Trim(strings.TrimPrefix(string(raw), `{"transfer":`), `"}`)
	_, err = p.request(t).roundTrip(ctx, proto.MethodUploadChunk, proto.ChunkParams{Transfer: id, Seq: 2, Data: []byte("x")})
	require.ErrorIs(t, err, proto.ErrInvalidParams)
	assert.Contains(t, err.Error(), "expected 1")
	_, err = p.request(t).roundTrip(ctx, proto.MethodUploadEnd, proto.TransferParams{Transfer: id})
	require.ErrorIs(t, err, proto.ErrUnknownTransfer, "an upload out of order is dropped")
	_, err = p.request(t).roundTrip(ctx, proto.MethodDownloadRd, proto.TransferParams{Transfer: id})
	require.ErrorIs(t, err, proto.ErrUnknownTransfer)

	// An abandoned upload is dropped when its connection ends.
	other := newRequester(t, p.srv)
	_, err = other.roundTrip(ctx, proto.MethodUploadBegin, proto.PathParams{Path: "y"})
	require.NoError(t, err)
	require.NoError(t, other.close())
	waitFor(t, func() bool { return transfers(p.srv) == 0 })
}

func TestIdleTransferIsAborted(t *testing.T) {
	p := newPair(t, func(o *ServerOptions) { o.TransferIdleTimeout = 50 * time.Millisecond })
	_, err := p.request(t).roundTrip(ctxT(t), proto.MethodDownload, proto.PathParams{Path: "."})
	require.NoError(t, err)
	waitFor(t, func() bool { return transfers(p.srv) == 0 })
}

func transfers(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		c.mu.Lock()
		n += len(c.transfers)
		c.mu.Unlock()
	}
	return n
}

func assertNoTransfers(t *testing.T, s *Server) {
	t.Helper()
	waitFor(t, func() bool { return transfers(s) == 0 })
}

func TestUploadChunkInlineBase64(t *testing.T) {
	// A JSON-only peer sends chunk data base64 in params instead of as the
	// frame's binary payload.
	p := newPair(t)
	ctx := ctxT(t)
	raw, err := p.request(t).roundTrip(ctx, proto.MethodUploadBegin, proto.PathParams{Path: "inline"})
	require.NoError(t, err)
	var tp proto.TransferParams
	require.NoError(t, json.Unmarshal(raw, &tp))
	_, err = p.request(t).roundTrip(ctx, proto.MethodUploadChunk, proto.ChunkParams{Transfer: tp.Transfer, Seq: 1,
		Data: tarOf(t, entry{name: "f.txt", typ: tar.TypeReg, body: "inline"})})
	require.NoError(t, err)
	_, err = p.request(t).roundTrip(ctx, proto.MethodUploadEnd, tp)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(p.ws, "inline", "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "inline", string(got))
}

// Transfer roots (a session's editable paths) take uploads and downloads
// like the workspace, each confined to itself: a symlink entry may not
// point out of the root it is extracted into, and a path under none of the
// roots is refused.
func TestTransferRoots(t *testing.T) {
	testbed, other := t.TempDir(), t.TempDir()
	p := newPair(t, func(o *ServerOptions) { o.TransferRoots = []string{testbed} })
	ctx := ctxT(t)

	require.NoError(t, p.cli.Upload(ctx, filepath.Join(testbed, "pkg"), bytes.NewReader(tarOf(t,
		entry{name: "fix.py", typ: tar.TypeReg, body: "x = 2\n"}))))
	b, err := os.ReadFile(filepath.Join(testbed, "pkg", "fix.py"))
	require.NoError(t, err)
	assert.Equal(t, "x = 2\n", string(b))

	var got bytes.Buffer
	require.NoError(t, p.cli.Download(ctx, filepath.Join(testbed, "pkg", "fix.py"), &got))
	tr := tar.NewReader(&got)
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "fix.py", hdr.Name)

	// Relative paths are still the workspace's.
	require.NoError(t, p.cli.Upload(ctx, "rel", bytes.NewReader(tarOf(t, entry{name: "a", typ: tar.TypeReg, body: "a"}))))
	assert.FileExists(t, filepath.Join(p.ws, "rel", "a"))

	// Confined to its own root: no link out of it, not even into the workspace.
	err = p.cli.Upload(ctx, testbed, bytes.NewReader(tarOf(t, entry{name: "l", typ: tar.TypeSymlink, link: p.ws})))
	require.ErrorIs(t, err, proto.ErrOutsideWorkspace)
	err = p.cli.Download(ctx, filepath.Join(other, "x"), &got)
	require.ErrorIs(t, err, proto.ErrOutsideWorkspace)
	assert.Contains(t, err.Error(), "is not under the workspace "+p.ws+" or "+testbed)
	require.ErrorIs(t, p.cli.Download(ctx, testbed+"/../x", &got), proto.ErrOutsideWorkspace)
	assertNoTransfers(t, p.srv)

	_, err = NewServer(ServerOptions{Toolset: p.srv.opts.Toolset, Workspace: p.ws, TransferRoots: []string{"rel"}})
	assert.ErrorContains(t, err, `TransferRoots: "rel" is not an absolute directory`)
}
