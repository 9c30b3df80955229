package fileeditor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestViewFile(t *testing.T) {
	cases := []struct {
		name, content, want string
	}{
		{"final newline", "a\nb\n", "     1\ta\n     2\tb\n"},
		{"no final newline", "a\nb", "     1\ta\n     2\tb\n"},
		{"tabs and markup kept", "\tx := `<a href=\"[0-9]+\">`\n", "     1\t\tx := `<a href=\"[0-9]+\">`\n"},
		{"blank lines", "a\n\n\nb\n", "     1\ta\n     2\t\n     3\t\n     4\tb\n"},
		{"crlf shown without CR", "a\r\nb\r\n", "     1\ta\n     2\tb\n"},
	}
	e := newExec(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, "f.txt", []byte(c.content))
			obs := ok(t, e, Action{Command: "view", Path: p})
			assert.Equal(t, fmt.Sprintf("Here's the result of running `cat -n` on %s:\n", p)+c.want, obs.Text())
			assert.Equal(t, strings.Count(c.want, "\n"), out(obs).NumLines)
		})
	}
	t.Run("empty file", func(t *testing.T) {
		p := writeTemp(t, "empty.txt", nil)
		// As upstream: the header and an empty line 1.
		obs := ok(t, e, Action{Command: "view", Path: p})
		assert.Equal(t, "Here's the result of running `cat -n` on "+p+":\n     1\t\n", obs.Text())
		assert.Zero(t, out(obs).NumLines)
	})
}

func TestViewRange(t *testing.T) {
	var sb strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	p := writeTemp(t, "f.txt", []byte(sb.String()))
	e := newExec(t)
	header := "Here's the result of running `cat -n` on " + p + ":\n"
	okCases := []struct {
		name  string
		vr    []int
		first int
		last  int
		note  bool
	}{
		{"middle", []int{50, 100}, 50, 100, false},
		{"single line", []int{7, 7}, 7, 7, false},
		{"to the end", []int{195, -1}, 195, 200, false},
		{"end clamped", []int{198, 500}, 198, 200, true},
		{"whole", []int{1, 200}, 1, 200, false},
	}
	for _, c := range okCases {
		t.Run(c.name, func(t *testing.T) {
			obs := ok(t, e, Action{Command: "view", Path: p, ViewRange: c.vr})
			var want strings.Builder
			if c.note {
				want.WriteString("NOTE: We only show up to 200 since there're only 200 lines in this file.\n")
			}
			want.WriteString(header)
			for i := c.first; i <= c.last; i++ {
				fmt.Fprintf(&want, "%6d\tline %d\n", i, i)
			}
			assert.Equal(t, want.String(), obs.Text())
		})
	}
	errCases := []struct {
		name string
		vr   []int
		want string
	}{
		{"start zero", []int{0, 5}, "Invalid `view_range` parameter: [0, 5]. Its first element `0` should be within the range of lines of the file: [1, 200]."},
		{"start past end", []int{201, 205}, "Its first element `201` should be within the range of lines of the file: [1, 200]."},
		{"end before start", []int{10, 5}, "Its second element `5` should be greater than or equal to the first element `10`."},
		{"end below -1", []int{10, -2}, "Its second element `-2` should be greater than or equal to the first element `10`."},
		{"one element", []int{3}, "Invalid `view_range` parameter: [3]. It should be a list of two integers."},
		{"three elements", []int{1, 2, 3}, "It should be a list of two integers."},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			assert.Contains(t, bad(t, e, Action{Command: "view", Path: p, ViewRange: c.vr}), c.want)
		})
	}
	t.Run("empty file", func(t *testing.T) {
		pe := writeTemp(t, "e.txt", nil)
		assert.Contains(t, bad(t, e, Action{Command: "view", Path: pe, ViewRange: []int{1, 2}}), "is empty")
	})
}

// Upstream numbers the text after cutting it, so lines after the cut get
// wrong numbers. Here every number shown is the real one.
func TestViewTruncationKeepsRealLineNumbers(t *testing.T) {
	var sb strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&sb, "this is line number %d of the file\n", i)
	}
	p := writeTemp(t, "big.txt", []byte(sb.String()))
	e := newExec(t)
	obs := ok(t, e, Action{Command: "view", Path: p})
	text := obs.Text()
	assert.True(t, out(obs).Truncated)
	assert.LessOrEqual(t, len([]rune(text)), DefaultMaxResponseChars+200)
	assert.Contains(t, text, "<response clipped>")
	assert.Contains(t, text, "grep -n")
	assert.Contains(t, text, "     1\tthis is line number 1 of the file\n")
	assert.Contains(t, text, "  2000\tthis is line number 2000 of the file\n")
	assert.Regexp(t, `\[Lines \d+ to \d+ are not shown; use `+"`view_range`"+` to see them\.\]`, text)
	for _, l := range strings.Split(text, "\n") {
		var n int
		var rest string
		if _, err := fmt.Sscanf(l, "%d\t", &n); err == nil {
			rest = l[strings.IndexByte(l, '\t')+1:]
			assert.Equal(t, fmt.Sprintf("this is line number %d of the file", n), rest)
		}
	}

	t.Run("one huge line", func(t *testing.T) {
		p := writeTemp(t, "min.js", []byte(strings.Repeat("x", 50000)+"\nlast\n"))
		text := ok(t, e, Action{Command: "view", Path: p}).Text()
		assert.Contains(t, text, lineCutMarker)
		assert.Contains(t, text, "     2\tlast\n")
		assert.Less(t, len(text), DefaultMaxResponseChars+200)
	})
	t.Run("range is clipped too", func(t *testing.T) {
		text := ok(t, e, Action{Command: "view", Path: p, ViewRange: []int{1001, -1}}).Text()
		assert.Contains(t, text, "  1001\tthis is line number 1001 of the file\n")
		assert.Contains(t, text, "<response clipped>")
	})
}

func TestViewDirectory(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"B_dir/sub", "a_dir", ".git/objects", "a_dir/.cache"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for _, f := range []string{"Z.txt", "a.txt", ".env", "B_dir/x.go", "B_dir/.hidden", "a_dir/deep.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "B_dir/sub/too-deep.txt"), nil, 0o644))
	require.NoError(t, os.Symlink(".", filepath.Join(root, "loop")))           // a loop
	require.NoError(t, os.Symlink("B_dir", filepath.Join(root, "link_dir")))   // followed
	require.NoError(t, os.Symlink("missing", filepath.Join(root, "dangling"))) // listed as a file

	e := newExec(t)
	obs := ok(t, e, Action{Command: "view", Path: root + "/"})
	want := "Here's the files and directories up to 2 levels deep in " + root + ", excluding hidden items:\n" +
		root + "/\n" +
		root + "/B_dir/\n" +
		root + "/B_dir/sub/\n" +
		root + "/B_dir/x.go\n" +
		root + "/Z.txt\n" +
		root + "/a.txt\n" +
		root + "/a_dir/\n" +
		root + "/a_dir/deep.txt\n" +
		root + "/dangling\n" +
		root + "/link_dir/\n" +
		root + "/link_dir/sub/\n" +
		root + "/link_dir/x.go\n" +
		root + "/loop/\n" +
		root + "/loop/B_dir/\n" +
		root + "/loop/Z.txt\n" +
		root + "/loop/a.txt\n" +
		root + "/loop/a_dir/\n" +
		root + "/loop/dangling\n" +
		root + "/loop/link_dir/\n" +
		root + "/loop/loop/\n" +
		// Only the top level's hidden entries are counted, as upstream counts them.
		"\n2 hidden files/directories in this directory are excluded. You can use 'ls -la " + root + "' to see them."
	assert.Equal(t, want, obs.Text())
	assert.Equal(t, "directory", out(obs).Kind)

	t.Run("only top-level hidden", func(t *testing.T) {
		d := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(d, ".a"), nil, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "b"), nil, 0o644))
		assert.Equal(t, "Here's the files and directories up to 2 levels deep in "+d+", excluding hidden items:\n"+d+"/\n"+d+"/b"+
			"\n\n1 hidden files/directories in this directory are excluded. You can use 'ls -la "+d+"' to see them.",
			ok(t, e, Action{Command: "view", Path: d}).Text())
	})
	t.Run("only nested hidden: no note", func(t *testing.T) {
		d := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(d, "sub", ".cache"), 0o755))
		assert.Equal(t, "Here's the files and directories up to 2 levels deep in "+d+", excluding hidden items:\n"+d+"/\n"+d+"/sub/",
			ok(t, e, Action{Command: "view", Path: d}).Text())
	})
	t.Run("hidden root itself is listed", func(t *testing.T) {
		d := filepath.Join(t.TempDir(), ".config")
		require.NoError(t, os.MkdirAll(filepath.Join(d, "app"), 0o755))
		assert.Contains(t, ok(t, e, Action{Command: "view", Path: d}).Text(), d+"/app/")
	})
	t.Run("view_range refused", func(t *testing.T) {
		assert.Equal(t, "Invalid `view_range` parameter: [1, 2]. The `view_range` parameter is not allowed when `path` points to a directory.",
			bad(t, e, Action{Command: "view", Path: root, ViewRange: []int{1, 2}}))
	})
	t.Run("large directory is clipped", func(t *testing.T) {
		d := t.TempDir()
		for i := range 1000 {
			require.NoError(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("file_with_a_longish_name_%04d.txt", i)), nil, 0o644))
		}
		obs := ok(t, e, Action{Command: "view", Path: d})
		assert.Contains(t, obs.Text(), dirClippedNotice)
		assert.Contains(t, obs.Text(), "file_with_a_longish_name_0000.txt")
		assert.True(t, out(obs).Truncated)
		assert.LessOrEqual(t, len(obs.Text()), DefaultMaxResponseChars)
	})
	t.Run("unreadable subdirectory skipped", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads any directory")
		}
		d := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(d, "locked"), 0o000))
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(d, "locked"), 0o755) })
		assert.Contains(t, ok(t, e, Action{Command: "view", Path: d}).Text(), d+"/locked/")
	})
	t.Run("filesystem root", func(t *testing.T) {
		text := ok(t, e, Action{Command: "view", Path: "/"}).Text()
		assert.Contains(t, text, "excluding hidden items:\n/\n")
		assert.NotContains(t, text, "//")
	})
}

func TestViewImage(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00")
	cases := []struct {
		name string
		data []byte
		mime string
	}{
		{"x.png", png, "image/png"},
		{"x.jpg", []byte("\xFF\xD8\xFF\xE0\x00\x10JFIF\x00"), "image/jpeg"},
		{"x.jpeg", []byte("\xFF\xD8\xFF\xDB\x00"), "image/jpeg"},
		{"x.gif", []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00"), "image/gif"},
		{"x.webp", []byte("RIFF\x1a\x00\x00\x00WEBPVP8 \x00\x00"), "image/webp"},
		{"no-extension", png, "image/png"},
	}
	e := newExec(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, c.name, c.data)
			obs := ok(t, e, Action{Command: "view", Path: p})
			require.Len(t, obs.Content, 2)
			assert.Equal(t, "Image file "+p+" read successfully. Displaying image content.", obs.Content[0].Text)
			assert.Equal(t, "image", obs.Content[1].Type)
			assert.Equal(t, c.mime, obs.Content[1].MIMEType)
			assert.Equal(t, c.data, obs.Content[1].Data)
			assert.Equal(t, "image", out(obs).Kind)
		})
	}
	t.Run("images cannot be edited", func(t *testing.T) {
		p := writeTemp(t, "x.png", png)
		msg := bad(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("PNG"), NewStr: ptr("GIF")})
		assert.Contains(t, msg, "is a PNG image")
		msg = bad(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr("x")})
		assert.Contains(t, msg, "cannot be edited")
	})
	t.Run("bmp is refused as binary", func(t *testing.T) {
		p := writeTemp(t, "x.bmp", []byte("BM\x00\x00\x00\x00\x00\x00"))
		assert.Contains(t, bad(t, e, Action{Command: "view", Path: p}), "Only PNG, JPEG, GIF and WebP images can be viewed.")
	})
	t.Run("text named .png is text", func(t *testing.T) {
		p := writeTemp(t, "fake.png", []byte("hello\n"))
		assert.Contains(t, ok(t, e, Action{Command: "view", Path: p}).Text(), "     1\thello\n")
	})
}

func TestRefusedFiles(t *testing.T) {
	e := newExec(t, func(o *Options) { o.MaxFileBytes = 1 << 20 })
	t.Run("binary", func(t *testing.T) {
		p := writeTemp(t, "a.out", []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00"))
		for _, a := range []Action{
			{Command: "view", Path: p},
			{Command: "str_replace", Path: p, OldStr: ptr("ELF"), NewStr: ptr("FLE")},
			{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr("x")},
		} {
			msg := bad(t, e, a)
			assert.Equal(t, "File validation failed for "+p+": File appears to be binary and this file type cannot be read or edited by this tool (it contains NUL bytes).", msg)
		}
		assert.Equal(t, "\x7fELF\x02\x01\x01\x00\x00\x00\x00", readString(t, p))
	})
	t.Run("control characters", func(t *testing.T) {
		p := writeTemp(t, "ctl", []byte(strings.Repeat("\x01\x02\x03a", 100)))
		assert.Contains(t, bad(t, e, Action{Command: "view", Path: p}), "control characters")
	})
	t.Run("too large", func(t *testing.T) {
		p := writeTemp(t, "big.txt", []byte(strings.Repeat("a", 1<<20+1)))
		assert.Equal(t, "File validation failed for "+p+": File is too large (1.0MB). Maximum allowed size is 1MB.",
			bad(t, e, Action{Command: "view", Path: p}))
		bad(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("a"), NewStr: ptr("b")})
	})
	t.Run("default limit is 10MB", func(t *testing.T) {
		p := writeTemp(t, "big.txt", nil)
		require.NoError(t, os.Truncate(p, 10<<20+1))
		assert.Contains(t, bad(t, newExec(t), Action{Command: "view", Path: p}), "Maximum allowed size is 10MB.")
	})
	t.Run("edit result too large", func(t *testing.T) {
		p := writeTemp(t, "f.txt", []byte(strings.Repeat("a", 1<<20-10)+"\n"))
		assert.Contains(t, bad(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(1), NewStr: ptr(strings.Repeat("b", 100))}), "over the 1MB limit")
	})
	t.Run("fifo does not hang", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "fifo")
		require.NoError(t, syscall.Mkfifo(p, 0o644))
		assert.Contains(t, bad(t, e, Action{Command: "view", Path: p}), "is not a regular file or directory (it is a named pipe)")
		assert.Contains(t, bad(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr("x")}), "named pipe")
	})
	t.Run("device", func(t *testing.T) {
		assert.Contains(t, bad(t, e, Action{Command: "view", Path: "/dev/null"}), "character device")
	})
}
