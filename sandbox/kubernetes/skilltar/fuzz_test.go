package skilltar

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzUnpack feeds Unpack archives as they might come through the API:
// it never panics, never writes outside its folder, and what it writes is
// only folders and regular files.
func FuzzUnpack(f *testing.F) {
	seed := func(hdrs ...tar.Header) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for _, h := range hdrs {
			_ = tw.WriteHeader(&h)
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		_ = tw.Close()
		_ = zw.Close()
		return buf.Bytes()
	}
	f.Add(seed(tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o555}, tar.Header{Name: "a/SKILL.md", Typeflag: tar.TypeReg, Mode: 0o444, Size: 3}))
	f.Add(seed(tar.Header{Name: "../x", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(seed(tar.Header{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, tar.Header{Name: "a/b", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(seed(tar.Header{Name: "a/b/c", Typeflag: tar.TypeReg, Mode: 0o755, Size: 2}, tar.Header{Name: "a/b", Typeflag: tar.TypeReg, Size: 1}))
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dst := filepath.Join(parent, "dst")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = filepath.Walk(parent, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) })
		})
		_ = Unpack(bytes.NewReader(data), dst)
		_ = filepath.Walk(parent, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			if p != parent && p != dst && !strings.HasPrefix(p, dst+string(filepath.Separator)) {
				t.Errorf("written outside the folder: %s", p)
			}
			if m := fi.Mode(); !m.IsDir() && !m.IsRegular() {
				t.Errorf("%s is %v: not a folder or a regular file", p, m.Type())
			}
			return nil
		})
	})
}
