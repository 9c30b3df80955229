package agent

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
)

func TestTruncatedArchiveLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
		data int
	}{
		{"cut inside the data", 100_000, 50_000},
		{"100 GiB announced, 1 KB sent", 100 << 30, 1024},
		{"100 GiB announced, nothing sent", 100 << 30, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			require.NoError(t, tw.WriteHeader(&tar.Header{Name: "tr/trunc.bin", Mode: 0o644, Size: tc.size, Typeflag: tar.TypeReg}))
			_, _ = tw.Write(bytes.Repeat([]byte("x"), tc.data)) // short on purpose: the archive lies
			ws := t.TempDir()
			root, err := os.OpenRoot(ws)
			require.NoError(t, err)
			defer func() { _ = root.Close() }()
			_, err = extractTar(root, bytes.NewReader(b.Bytes()), extractLimits{workspace: ws, destRel: "."})
			require.ErrorIs(t, err, proto.ErrBadArchive)
			entries, _ := os.ReadDir(filepath.Join(ws, "tr"))
			require.Empty(t, entries, "nothing partial is left")
		})
	}
}
