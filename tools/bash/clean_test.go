package bash

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCleaner(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"plain", "hello\nworld\n", "hello\nworld\n"},
		{"crlf", "a\r\nb\r\n", "a\nb\n"},
		{"colours", "\x1b[1;31mred\x1b[0m text\n", "red text\n"},
		{"osc title bel", "\x1b]0;title\x07after\n", "after\n"},
		{"osc st", "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n", "link\n"},
		{"dcs", "\x1bPq#0;2;0;0;0\x1b\\x\n", "x\n"},
		{"two byte esc", "\x1b=\x1b(Ba\x1b>\n", "a\n"},
		{"bracketed paste", "\x1b[?2004hcmd\x1b[?2004l\n", "cmd\n"},
		{"dsr query", "\x1b[6nok\n", "ok\n"},
		{"progress bar", "10%\r20%\r100%\n", "100%\n"},
		{"overwrite keeps rest", "abcdef\rXY\n", "XYcdef\n"},
		{"erase line", "Downloading 1/3\r\x1b[KDone\n", "Done\n"},
		{"erase whole line", "abc\x1b[2K\rx\n", "x\n"},
		{"backspace", "abc\b\bX\n", "aXc\n"},
		{"cursor column", "abc\x1b[1GZ\n", "Zbc\n"},
		{"tab kept", "a\tb\n", "a\tb\n"},
		{"bel and nul dropped", "a\x07b\x00c\n", "abc\n"},
		{"invalid utf8", "a\xff\xfeb\n", "a\ufffd\ufffdb\n"},
		{"utf8 kept", "héllo 世界 🙂\n", "héllo 世界 🙂\n"},
		{"c1 dropped", "a\u0085b\n", "ab\n"},
		{"unfinished line kept", "prompt> ", "prompt> "},
		{"truncated utf8 at end", "a\xe4\xb8", "a\ufffd\ufffd"},
		{"esc then newline", "a\x1b\nb\n", "a\nb\n"},
		{"esc inside osc restarts", "\x1b]0;t\x1b[31mred\n", "red\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, cleanString([]byte(c.in)))
			// Byte by byte gives the same: chunks may split anything.
			var cl cleaner
			var got strings.Builder
			for i := 0; i < len(c.in); i++ {
				got.Write(cl.write([]byte{c.in[i]}))
			}
			got.Write(cl.finish())
			assert.Equal(t, c.want, got.String())
		})
	}
}

func TestCleanerFlushLine(t *testing.T) {
	var c cleaner
	assert.Equal(t, "done\n", string(c.write([]byte("done\nPassword: "))))
	assert.Equal(t, "Password: ", string(c.flushLine()))
	assert.Empty(t, string(c.flushLine()))
	assert.Equal(t, "x\n", string(c.write([]byte("x\n"))))
}

func TestCleanerLongLineIsEmitted(t *testing.T) {
	var c cleaner
	got := c.write([]byte(strings.Repeat("x", maxLineRunes+10)))
	assert.Len(t, got, maxLineRunes)
	assert.Equal(t, strings.Repeat("x", 10), string(c.finish()))
}

// Chunks of any size give the text of the whole: a character split between
// reads is completed in order (a bug took bytes past it and turned valid
// 世 runs into U+FFFD), and invalid bytes stay one U+FFFD each.
func TestCleanerChunkSizes(t *testing.T) {
	inputs := []string{
		strings.Repeat("世", 500) + "\n" + strings.Repeat("é世🙂a", 300) + "\n",
		"a\xf0\x90Ab\xe4\xb8\xe4\xb8\x96c\xff\xe4\n世\xc3",
		"\xe4\xb8\x96\xf0\x9f\x99\x82\xe4\n",
	}
	for _, in := range inputs {
		whole := cleanString([]byte(in))
		if in == inputs[0] {
			assert.Equal(t, in, whole, "valid text is unchanged")
		}
		for size := 1; size <= 9; size++ {
			var cl cleaner
			var got strings.Builder
			for i := 0; i < len(in); i += size {
				got.Write(cl.write([]byte(in[i:min(i+size, len(in))])))
			}
			got.Write(cl.finish())
			assert.Equal(t, whole, got.String(), "chunks of %d bytes", size)
		}
	}
}
