package bash

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
	a := newAccum(1000, dir)
	text := strings.Repeat("é", 1000) // exactly at the limit: not cut
	a.write([]byte(text))
	r := a.finish()
	assert.Equal(t, text, r.text)
	assert.False(t, r.truncated)
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
			a := newAccum(30000, dir)
			if memCap > 0 {
				a.memCap = memCap
			}
			data := []byte(full.String())
			for len(data) > 0 { // odd chunk sizes
				n := min(777, len(data))
				a.write(data[:n])
				data = data[n:]
			}
			r := a.finish()
			require.True(t, r.truncated)
			assert.LessOrEqual(t, utf8.RuneCountInString(r.text), 30000)
			assert.Greater(t, utf8.RuneCountInString(r.text), 29900)
			assert.True(t, strings.HasPrefix(r.text, "line 1\nline 2\n"))
			assert.True(t, strings.HasSuffix(r.text, "line 20000\n"))
			assert.Contains(t, r.text, "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you. The complete output has been saved to "+r.path)
			assert.Regexp(t, `truncated part starts around line \d+\)`, r.text)
			saved, err := os.ReadFile(r.path)
			require.NoError(t, err)
			assert.Equal(t, full.String(), string(saved))
			st, err := os.Stat(r.path)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		})
	}
}

func TestAccumLineNumberOfCut(t *testing.T) {
	a := newAccum(1000, t.TempDir())
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(writerFunc(a.write), "%d\n", i)
	}
	r := a.finish()
	require.True(t, r.truncated)
	cut := strings.Index(r.text, "<response clipped>")
	require.GreaterOrEqual(t, cut, 0, "the clip notice is there")
	head := r.text[:cut]
	line := strings.Count(head, "\n") + 1
	assert.Contains(t, r.text, fmt.Sprintf("starts around line %d)", line))
}

func TestAccumWithoutDirStillCuts(t *testing.T) {
	a := newAccum(1000, "/proc/definitely/not/writable")
	a.write([]byte(strings.Repeat("x", 5000)))
	r := a.finish()
	assert.True(t, r.truncated)
	assert.Empty(t, r.path)
	assert.Contains(t, r.text, plainNotice)
	assert.LessOrEqual(t, utf8.RuneCountInString(r.text), 1000)
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }
