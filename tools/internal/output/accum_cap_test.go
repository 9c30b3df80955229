package output

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One saved output must leave room for others in the sandbox's state
// directory, a 64 MiB tmpfs (sandbox/docker.DefaultRunDirSize).
func TestMaxSavedBytesIsAFractionOfTheStateDir(t *testing.T) {
	assert.LessOrEqual(t, maxSavedBytes, (64<<20)/4)
	assert.Equal(t, int64(maxSavedBytes), New(1000, t.TempDir(), testPrefix).saveCap)
}

// An output larger than the cap keeps its first and its last half of the
// cap in the file, with a line in between saying how much was cut.
func TestAccumHugeOutputKeepsHeadAndTail(t *testing.T) {
	var full strings.Builder
	for i := 1; full.Len() < 50000; i++ {
		fmt.Fprintf(&full, "line %d\n", i)
	}
	whole := full.String()
	for _, size := range []int{999, 1000, 1001, 1500, 2000, 2001, 2777, len(whole)} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			out := whole[:size]
			a := New(600, t.TempDir(), testPrefix) // the note leaves room for some output
			a.saveCap = 1000
			a.memCap = 300 // spill early, so writes go to the file in pieces
			for data := out; len(data) > 0; {
				n := min(1+rand.IntN(150), len(data))
				a.Add([]byte(data[:n]))
				data = data[n:]
			}
			r := a.Finish()
			require.True(t, r.Truncated)
			require.NotEmpty(t, r.Path, r.Text)
			saved, err := os.ReadFile(r.Path)
			require.NoError(t, err)
			if size <= 1000 {
				assert.Equal(t, out, string(saved), "saved whole")
				assert.Contains(t, r.Text, "The complete output has been saved to "+r.Path)
				return
			}
			require.Len(t, saved, 1000)
			assert.Equal(t, out[:500], string(saved[:500]), "head")
			note := regexp.MustCompile(`^\n\n\[\.\.\. (\d+) bytes of output cut here: this file keeps the first 500 bytes and the last 500 bytes \.\.\.\]\n\n`).FindSubmatch(saved[500:])
			require.NotNil(t, note, "%q", saved[500:])
			rest := saved[500+len(note[0]):]
			assert.Equal(t, out[len(out)-len(rest):], string(rest), "tail")
			assert.Equal(t, strconv.Itoa(size-500-len(rest)), string(note[1]), "bytes cut")
			assert.Contains(t, r.Text, "The output is larger than 1000 bytes, the most saved of one output: its first 500 bytes and last 500 bytes have been saved to "+r.Path+" - you can use other tools to view them")
			assert.True(t, strings.HasSuffix(r.Text, out[len(out)-20:]), "the shown text keeps its tail")
		})
	}
}

// The real cap, through the real file.
func TestAccumDefaultCap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 17 MiB")
	}
	a := New(30000, t.TempDir(), testPrefix)
	line := bytes.Repeat([]byte("x"), 1023)
	line = append(line, '\n')
	for i := range 17 << 10 {
		copy(line, fmt.Sprintf("%08d", i))
		a.Add(line)
	}
	r := a.Finish()
	st, err := os.Stat(r.Path)
	require.NoError(t, err)
	assert.Equal(t, int64(16<<20), st.Size())
	assert.Contains(t, r.Text, "The output is larger than 16 MiB, the most saved of one output: its first 8 MiB and last 8 MiB have been saved to "+r.Path)
	f, err := os.Open(r.Path)
	require.NoError(t, err)
	defer f.Close()
	end := make([]byte, 1024)
	_, err = f.ReadAt(end, st.Size()-1024)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%08d", 17<<10-1), string(end[:8]), "the file ends with the last line")
	assert.Equal(t, []string{r.Path}, savedOutputs(t, filepath.Dir(r.Path)))
}

func TestRotateLeft(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	defer f.Close()
	for _, n := range []int{1, 2, 3, 10, 200000} {
		for _, k := range []int{0, 1, n / 3, n / 2, n - 1} {
			data := make([]byte, n+20)
			for i := range data {
				data[i] = byte(rand.IntN(256))
			}
			require.NoError(t, f.Truncate(0))
			_, err := f.WriteAt(data, 0)
			require.NoError(t, err)
			require.NoError(t, rotateLeft(f, 10, int64(10+n), int64(k)))
			got := make([]byte, len(data))
			_, err = f.ReadAt(got, 0)
			require.NoError(t, err)
			want := slicesConcat(data[:10], data[10+k:10+n], data[10:10+k], data[10+n:])
			require.True(t, bytes.Equal(want, got), "n=%d k=%d", n, k)
		}
	}
}

func slicesConcat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}
