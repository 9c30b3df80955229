package agent

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRelay(t *testing.T) {
	const end = "sbd-end-0123abcd"
	cases := []struct {
		name, in, out string
		status        int
		err           error
	}{
		{"plain", "hello\nworld\n\n" + end + ":0\n", "hello\nworld\n", 0, nil},
		{"no trailing newline", "no newline\n" + end + ":3\n", "no newline", 3, nil},
		{"empty output", "\n" + end + ":127\n", "", 127, nil},
		{"after the mark is not read", "out\n\n" + end + ":1\nlate background output\n", "out\n", 1, nil},
		{"look-alikes are output", "x\n" + end + ":\n" + end + ":abc\n\n" + end + "0\n\n" + end + ":2\n",
			"x\n" + end + ":\n" + end + ":abc\n\n" + end + "0\n", 2, nil},
		{"another mark", "\nother:1\n\n" + end + ":0\n", "\nother:1\n", 0, nil},
		{"cut off", "partial\n" + end + ":4", "partial\n" + end + ":4", 0, ErrNoEndMark},
		{"killed", "just output\n", "just output\n", 0, ErrNoEndMark},
	}
	readers := map[string]func(string) io.Reader{
		"whole":      func(s string) io.Reader { return strings.NewReader(s) },
		"byte":       func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":       func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
		"data+eof":   func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
		"small bufs": func(s string) io.Reader { return &chunky{s: s, n: 7} },
	}
	for _, c := range cases {
		for rn, mk := range readers {
			t.Run(c.name+"/"+rn, func(t *testing.T) {
				var out bytes.Buffer
				status, err := Relay(mk(c.in), &out, end)
				if c.err != nil {
					require.ErrorIs(t, err, c.err)
				} else {
					require.NoError(t, err)
					assert.Equal(t, c.status, status)
				}
				assert.Equal(t, c.out, out.String())
			})
		}
	}
}

// Output much larger than the relay's buffer, in reads of 4 KiB, the mark
// at the end: every byte through, a write per read at most (never a line
// at a time).
func TestRelayLargeOutput(t *testing.T) {
	const end = "E"
	var in, want bytes.Buffer
	for i := range 200000 {
		line := strings.Repeat("x", i%97) + "\n"
		in.WriteString(line)
		want.WriteString(line)
	}
	in.WriteString("\nE:0\n")
	w := &countWrites{}
	status, err := Relay(&chunky{s: in.String(), n: 4096}, w, end)
	require.NoError(t, err)
	assert.Equal(t, 0, status)
	assert.True(t, bytes.Equal(want.Bytes(), w.b.Bytes()), "output differs")
	assert.LessOrEqual(t, w.n, in.Len()/4096+1, "writes: %d", w.n)
}

func TestRelayBadMarkAndWriteError(t *testing.T) {
	_, err := Relay(strings.NewReader("x"), io.Discard, "a:b")
	require.Error(t, err)
	_, err = Relay(strings.NewReader("x"), io.Discard, "")
	require.Error(t, err)
	boom := errors.New("boom")
	_, err = Relay(strings.NewReader("some output\n"), errWriter{boom}, "E")
	require.ErrorIs(t, err, boom)
}

type chunky struct {
	s string
	n int
}

func (c *chunky) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

type countWrites struct {
	b bytes.Buffer
	n int
}

func (w *countWrites) Write(p []byte) (int, error) { w.n++; return w.b.Write(p) }

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }
