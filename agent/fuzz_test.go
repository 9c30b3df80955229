package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// FuzzExtractTar feeds arbitrary bytes to the upload extractor as the tar
// stream of an upload into <workspace>/dest. Properties: it never panics;
// nothing is written outside the destination (a sibling directory of the
// workspace, and the workspace beside dest, stay as they were); every
// symlink it creates points inside the workspace; a refused entry is
// ErrBadArchive or ErrOutsideWorkspace, or a file system error naming the
// entry.
func FuzzExtractTar(f *testing.F) {
	f.Add(fuzzTar(f, tarEntry{hdr: tar.Header{Name: "a.txt", Mode: 0o644, Typeflag: tar.TypeReg}, body: "hello"}))
	f.Add(fuzzTar(f,
		tarEntry{hdr: tar.Header{Name: "./", Mode: 0o755, Typeflag: tar.TypeDir}},
		tarEntry{hdr: tar.Header{Name: "d/", Mode: 0o555, Typeflag: tar.TypeDir}},
		tarEntry{hdr: tar.Header{Name: "d/f", Mode: 0o4755, Typeflag: tar.TypeReg, ModTime: time.Unix(1e9, 0)}, body: "x"},
		tarEntry{hdr: tar.Header{Name: "d/l", Linkname: "f", Typeflag: tar.TypeSymlink}},
		tarEntry{hdr: tar.Header{Name: "h", Linkname: "d/f", Typeflag: tar.TypeLink}},
	))
	f.Add(fuzzTar(f, tarEntry{hdr: tar.Header{Name: "../escape", Mode: 0o644, Typeflag: tar.TypeReg}, body: "x"}))
	f.Add(fuzzTar(f, tarEntry{hdr: tar.Header{Name: "/abs", Mode: 0o644, Typeflag: tar.TypeReg}}))
	f.Add(fuzzTar(f, tarEntry{hdr: tar.Header{Name: "up", Linkname: "../../outside", Typeflag: tar.TypeSymlink}}))
	f.Add(fuzzTar(f,
		tarEntry{hdr: tar.Header{Name: "in", Linkname: "..", Typeflag: tar.TypeSymlink}},
		tarEntry{hdr: tar.Header{Name: "in/x", Mode: 0o644, Typeflag: tar.TypeReg}, body: "through the link"},
	))
	f.Add(fuzzTar(f, tarEntry{hdr: tar.Header{Name: "hl", Linkname: "../outside/keep", Typeflag: tar.TypeLink}}))
	f.Add(fuzzTar(f, tarEntry{hdr: tar.Header{Name: "fifo", Mode: 0o644, Typeflag: tar.TypeFifo}}))
	full := fuzzTar(f, tarEntry{hdr: tar.Header{Name: "big", Mode: 0o644, Typeflag: tar.TypeReg}, body: strings.Repeat("y", 1000)})
	f.Add(full[:700]) // ends inside a file
	f.Add([]byte{})
	f.Add([]byte("not a tar at all"))

	f.Fuzz(func(t *testing.T, in []byte) {
		base := t.TempDir()
		ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
		dest := filepath.Join(ws, "dest")
		for _, d := range []string{dest, outside} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dest)
		if err != nil {
			t.Fatal(err)
		}
		var xerr error
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			_, xerr = extractTar(root, bytes.NewReader(in), extractLimits{workspace: ws, destRel: "dest"})
		}()
		select {
		case <-ended:
		case <-time.After(time.Minute): // a hang detector, not a timing assert
			buf := make([]byte, 1<<20)
			t.Fatalf("extraction hangs:\n%s", buf[:runtime.Stack(buf, true)])
		}
		_ = root.Close() // a directory handle: nothing to flush
		// Entries may have made directories unwritable: let TempDir clean up.
		t.Cleanup(func() { _ = chmodAll(base) })

		if xerr != nil && !errors.Is(xerr, proto.ErrBadArchive) && !errors.Is(xerr, proto.ErrOutsideWorkspace) &&
			!strings.HasPrefix(xerr.Error(), "entry ") && !strings.HasPrefix(xerr.Error(), "hard link ") {
			t.Fatalf("undocumented error: %v", xerr)
		}
		assertOnly(t, base, "outside", "ws")
		assertOnly(t, ws, "dest")
		assertOnly(t, outside, "keep")
		if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "keep" {
			t.Fatalf("a file outside the destination changed: %q, %v", b, err)
		}
		err = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			if rel, err := filepath.Rel(ws, filepath.Clean(target)); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Errorf("symlink %s points outside the workspace: %s", p, target)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

type tarEntry struct {
	hdr  tar.Header
	body string
}

func fuzzTar(f *testing.F, entries ...tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.hdr.Size = int64(len(e.body))
		if err := tw.WriteHeader(&e.hdr); err != nil {
			f.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			f.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// assertOnly fails unless dir holds exactly these names.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, "/") != strings.Join(names, "/") {
		t.Fatalf("%s holds %v, want only %v: the extraction wrote outside its destination", dir, got, names)
	}
}

// chmodAll makes every directory under dir writable again.
func chmodAll(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return nil
	})
}
