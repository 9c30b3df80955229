package output

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAccumShortOutputIsWhole(t *testing.T) {
	dir := t.TempDir()
	a := New(1000, dir, testPrefix)
	text := strings.Repeat("é", 1000) // exactly at the limit: not cut
	a.Add([]byte(text))
	r := a.Finish()
	assert.Equal(t, text, r.Text)
	assert.False(t, r.Truncated)
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries, "no file for an output that was not cut")
}

func TestAccumCutsMiddleAndSavesFull(t *testing.T) {
	var full strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&full, "line %d\n", i)
	}
	for _, memCap := range []int{0, 4096} { // in memory, and spilled early
		t.Run(fmt.Sprint(memCap), func(t *testing.T) {
			dir := t.TempDir()
			a := New(30000, dir, testPrefix)
			if memCap > 0 {
				a.memCap = memCap
			}
			data := []byte(full.String())
			for len(data) > 0 { // odd chunk sizes
				n := min(777, len(data))
				a.Add(data[:n])
				data = data[n:]
			}
			r := a.Finish()
			require.True(t, r.Truncated)
			assert.LessOrEqual(t, utf8.RuneCountInString(r.Text), 30000)
			assert.Greater(t, utf8.RuneCountInString(r.Text), 29900)
			assert.True(t, strings.HasPrefix(r.Text, "line 1\nline 2\n"))
			assert.True(t, strings.HasSuffix(r.Text, "line 20000\n"))
			assert.Contains(t, r.Text, "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you. The complete output has been saved to "+r.Path)
			assert.Regexp(t, `truncated part starts around line \d+\)`, r.Text)
			saved, err := os.ReadFile(r.Path)
			require.NoError(t, err)
			assert.Equal(t, full.String(), string(saved))
			st, err := os.Stat(r.Path)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		})
	}
}

func TestAccumLineNumberOfCut(t *testing.T) {
	a := New(1000, t.TempDir(), testPrefix)
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(writerFunc(a.Add), "%d\n", i)
	}
	r := a.Finish()
	require.True(t, r.Truncated)
	cut := strings.Index(r.Text, "<response clipped>")
	require.GreaterOrEqual(t, cut, 0, "the clip notice is there")
	head := r.Text[:cut]
	line := strings.Count(head, "\n") + 1
	assert.Contains(t, r.Text, fmt.Sprintf("starts around line %d)", line))
}

func TestAccumWithoutDirStillCuts(t *testing.T) {
	a := New(1000, "/proc/definitely/not/writable", testPrefix)
	a.Add([]byte(strings.Repeat("x", 5000)))
	r := a.Finish()
	assert.True(t, r.Truncated)
	assert.Empty(t, r.Path)
	assert.Contains(t, r.Text, plainNotice)
	assert.LessOrEqual(t, utf8.RuneCountInString(r.Text), 1000)
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }

const testPrefix = "terminal_output_"

// NewFile writes everything to its file as it comes; a short output is
// shown whole, a long one cut, and the file keeps head and tail of a
// larger one than its cap.
func TestNewFileKeepsHeadAndTail(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/install.log"
	a, err := NewFile(path, 1000, 600)
	require.NoError(t, err)
	a.Add([]byte("short\n"))
	r := a.Finish()
	assert.Equal(t, "short\n", r.Text)
	assert.False(t, r.Truncated)
	saved, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "short\n", string(saved))

	a, err = NewFile(path, 1000, 600)
	require.NoError(t, err)
	var full strings.Builder
	for i := 1; full.Len() < 5000; i++ {
		fmt.Fprintf(&full, "line %d\n", i)
	}
	for data := full.String(); len(data) > 0; {
		n := min(97, len(data))
		a.Add([]byte(data[:n]))
		data = data[n:]
	}
	r = a.Finish()
	assert.True(t, r.Truncated)
	assert.LessOrEqual(t, utf8.RuneCountInString(r.Text), 600)
	saved, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, saved, 1000, "the file is capped")
	assert.Equal(t, full.String()[:500], string(saved[:500]), "head")
	assert.True(t, strings.HasSuffix(full.String(), string(saved[len(saved)-100:])), "tail")
	assert.Contains(t, string(saved), "bytes of output cut here")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no other file")
}
