package fileeditor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPathValidation(t *testing.T) {
	ws := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(ws, "exists.txt"), []byte("x\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "dir"), 0o755))
	e := newExec(t, func(o *Options) { o.Workspace = ws })
	noWS := newExec(t)
	home, _ := os.UserHomeDir()
	cases := []struct {
		name string
		e    *Executor
		a    Action
		want string
	}{
		{"relative suggests absolute", e, Action{Command: "view", Path: "exists.txt"},
			"Invalid `path` parameter: exists.txt. The path should be an absolute path, starting with `/`. Maybe you meant " + ws + "/exists.txt?"},
		{"relative create suggests too", e, Action{Command: "create", Path: "sub/../new.txt", FileText: ptr("")},
			"Maybe you meant " + ws + "/new.txt?"},
		{"relative without workspace", noWS, Action{Command: "view", Path: "exists.txt"},
			"Invalid `path` parameter: exists.txt. The path should be an absolute path, starting with `/`."},
		{"tilde", e, Action{Command: "view", Path: "~/x"}, "Maybe you meant " + filepath.Join(home, "x") + "?"},
		{"windows path", e, Action{Command: "view", Path: `C:\foo`}, "should be an absolute path"},
		{"empty path", e, Action{Command: "view", Path: ""}, "Invalid `path` parameter: . The path should be an absolute path, starting with `/`."},
		{"missing", e, Action{Command: "view", Path: ws + "/nope"},
			"Invalid `path` parameter: " + ws + "/nope. The path " + ws + "/nope does not exist. Please provide a valid path."},
		{"under a file", e, Action{Command: "view", Path: ws + "/exists.txt/x"}, "does not exist"},
		{"file with a trailing slash", e, Action{Command: "view", Path: ws + "/exists.txt/"}, "ends with a slash, but " + ws + "/exists.txt is a file"},
		{"edit a directory", e, Action{Command: "str_replace", Path: ws + "/dir", OldStr: ptr("a")},
			"Invalid `path` parameter: " + ws + "/dir. The path " + ws + "/dir is a directory and only the `view` command can be used on directories."},
		{"undo a directory", e, Action{Command: "undo_edit", Path: ws + "/dir"}, "is a directory"},
		{"create existing", e, Action{Command: "create", Path: ws + "/exists.txt", FileText: ptr("y")},
			"Invalid `path` parameter: " + ws + "/exists.txt. File already exists at: " + ws + "/exists.txt. Cannot overwrite files using command `create`."},
		{"create over a directory", e, Action{Command: "create", Path: ws + "/dir", FileText: ptr("y")}, "File already exists at"},
		{"unknown command", e, Action{Command: "delete", Path: ws + "/exists.txt"},
			"Unrecognized command delete. The allowed commands for the file_editor tool are: view, create, str_replace, insert, undo_edit"},
		{"missing file_text", e, Action{Command: "create", Path: ws + "/new.txt"}, "Parameter `file_text` is required for command: create."},
		{"missing old_str", e, Action{Command: "str_replace", Path: ws + "/exists.txt"}, "Parameter `old_str` is required for command: str_replace."},
		{"missing insert_line", e, Action{Command: "insert", Path: ws + "/exists.txt", NewStr: ptr("a")}, "Parameter `insert_line` is required for command: insert."},
		{"missing new_str for insert", e, Action{Command: "insert", Path: ws + "/exists.txt", InsertLine: ptr(0)}, "Parameter `new_str` is required for command: insert."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Contains(t, bad(t, c.e, c.a), c.want)
		})
	}
	assert.Equal(t, "x\n", readString(t, ws+"/exists.txt"))
	assert.NoFileExists(t, ws+"/new.txt")
}

func TestRoot(t *testing.T) {
	root := t.TempDir()
	outside := writeTemp(t, "out.txt", []byte("x\n"))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape.txt")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "in.txt"), []byte("x\n"), 0o644))
	e := newExec(t, func(o *Options) { o.Root = root })
	assert.Contains(t, bad(t, e, Action{Command: "view", Path: outside}), "The path is outside "+root)
	assert.Contains(t, bad(t, e, Action{Command: "view", Path: root + "/escape.txt"}), "outside")
	assert.Contains(t, bad(t, e, Action{Command: "view", Path: root + "/../x"}), "outside")
	ok(t, e, Action{Command: "view", Path: root + "/in.txt"})
	ok(t, e, Action{Command: "view", Path: root})
	ok(t, e, Action{Command: "create", Path: root + "/new.txt", FileText: ptr("n")})
}

func TestCreate(t *testing.T) {
	e := newExec(t)
	dir := t.TempDir()
	t.Run("ok", func(t *testing.T) {
		p := filepath.Join(dir, "a.py")
		obs := ok(t, e, Action{Command: "create", Path: p, FileText: ptr("print(1)\n")})
		assert.Equal(t, "File created successfully at: "+p, obs.Text())
		assert.Equal(t, "print(1)\n", readString(t, p))
		o := out(obs)
		assert.False(t, o.PrevExist)
		assert.Equal(t, "print(1)\n", *o.NewContent)
		assert.Nil(t, o.OldContent)
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o666)&^umask(), fi.Mode().Perm())
		assert.Empty(t, tempFiles(t, dir))
	})
	t.Run("empty text", func(t *testing.T) {
		p := filepath.Join(dir, "empty")
		ok(t, e, Action{Command: "create", Path: p, FileText: ptr("")})
		assert.Empty(t, readString(t, p))
	})
	t.Run("no parent directories", func(t *testing.T) {
		p := filepath.Join(dir, "x", "y", "z.txt")
		msg := bad(t, e, Action{Command: "create", Path: p, FileText: ptr("a")})
		assert.Contains(t, msg, "The parent directory "+filepath.Join(dir, "x", "y")+" does not exist")
		assert.NoDirExists(t, filepath.Join(dir, "x"))
	})
	t.Run("parent is a file", func(t *testing.T) {
		f := writeTemp(t, "file", []byte("x"))
		assert.Contains(t, bad(t, e, Action{Command: "create", Path: f + "/z.txt", FileText: ptr("a")}), f+" is not a directory, so no file can be created in it.")
	})
	t.Run("dangling symlink counts as existing", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "link")
		require.NoError(t, os.Symlink("nowhere", p))
		assert.Contains(t, bad(t, e, Action{Command: "create", Path: p, FileText: ptr("a")}), "File already exists")
	})
	t.Run("too large", func(t *testing.T) {
		small := newExec(t, func(o *Options) { o.MaxFileBytes = 1 << 20 })
		p := filepath.Join(dir, "big")
		assert.Contains(t, bad(t, small, Action{Command: "create", Path: p, FileText: ptr(strings.Repeat("a", 1<<20+1))}), "over the 1MB limit")
		assert.NoFileExists(t, p)
	})
}

func TestStrReplace(t *testing.T) {
	const sample = "def f():\n    return 1\n\ndef g():\n    return 2\n"
	cases := []struct {
		name     string
		content  string
		old, new *string
		want     string // file afterwards
		msg      string // substring of the reply
		isErr    bool
	}{
		{name: "single line", content: sample, old: ptr("return 1"), new: ptr("return 10"),
			want: "def f():\n    return 10\n\ndef g():\n    return 2\n"},
		{name: "multi line", content: sample, old: ptr("def g():\n    return 2\n"), new: ptr("def g():\n    x = 2\n    return x\n"),
			want: "def f():\n    return 1\n\ndef g():\n    x = 2\n    return x\n"},
		{name: "delete with empty new_str", content: sample, old: ptr("\ndef g():\n    return 2\n"), new: ptr(""),
			want: "def f():\n    return 1\n"},
		{name: "delete with missing new_str", content: sample, old: ptr("    return 1\n"), new: nil,
			want: "def f():\n\ndef g():\n    return 2\n"},
		{name: "regex characters are literal", content: "a.c\nabc\n", old: ptr("a.c"), new: ptr("x"), want: "x\nabc\n"},
		{name: "tabs kept", content: "\tif x {\n\t\ty()\n\t}\n", old: ptr("\t\ty()"), new: ptr("\t\tz()\n\t\tw()"),
			want: "\tif x {\n\t\tz()\n\t\tw()\n\t}\n"},
		{name: "unicode", content: "hello world\n", old: ptr("world"), new: ptr("世界 🌍"), want: "hello 世界 🌍\n"},
		{name: "fill empty file", content: "", old: ptr(""), new: ptr("first\n"), want: "first\n"},
		{name: "no match", content: sample, old: ptr("return 3"), new: ptr("x"), isErr: true,
			msg: "No replacement was performed, old_str `return 3` did not appear verbatim in "},
		{name: "multiple matches", content: sample, old: ptr("    return"), new: ptr("return"), isErr: true,
			msg: "No replacement was performed. Multiple occurrences of old_str `    return` in lines [2, 5]. Please ensure it is unique."},
		{name: "matches on one line", content: "x x\nx\n", old: ptr("x"), new: ptr("y"), isErr: true, msg: "in lines [1, 2]."},
		{name: "overlapping matches are ambiguous", content: "aaa\n", old: ptr("aa"), new: ptr("b"), isErr: true, msg: "Multiple occurrences"},
		{name: "same strings", content: sample, old: ptr("return 1"), new: ptr("return 1"), isErr: true,
			msg: "Invalid `new_str` parameter: return 1. No replacement was performed. `new_str` and `old_str` must be different."},
		{name: "empty old_str", content: sample, old: ptr(""), new: ptr("x"), isErr: true, msg: "cannot be empty"},
		{name: "whitespace hint", content: sample, old: ptr("return 1  \n\n\n"), new: ptr("x"), isErr: true,
			msg: "appears in lines [2]; check the whitespace"},
		{name: "indentation hint", content: sample, old: ptr("def g():\n  return 2"), new: ptr("x"), isErr: true,
			msg: "only in indentation or spacing start at line 4"},
		{name: "line number hint", content: sample, old: ptr("     2\t    return 1"), new: ptr("x"), isErr: true,
			msg: "includes the line numbers"},
	}
	e := newExec(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, "f.py", []byte(c.content))
			obs := call(t, e, Action{Command: "str_replace", Path: p, OldStr: c.old, NewStr: c.new})
			assert.Equal(t, c.isErr, obs.IsError, obs.Text())
			assert.Contains(t, obs.Text(), c.msg)
			if c.isErr {
				assert.Equal(t, c.content, readString(t, p), "file must be untouched")
				return
			}
			assert.Equal(t, c.want, readString(t, p))
			assert.Equal(t, c.content, *out(obs).OldContent)
			assert.Equal(t, c.want, *out(obs).NewContent)
		})
	}
}

func TestStrReplaceSnippet(t *testing.T) {
	var sb strings.Builder
	for i := 1; i <= 700; i++ {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	p := writeTemp(t, "f.txt", []byte(sb.String()))
	e := newExec(t)
	obs := ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("line 500\n"), NewStr: ptr("new A\nnew B\n")})
	want := "The file " + p + " has been edited. Here's the result of running `cat -n` on a snippet of " + p + ":\n" +
		"   496\tline 496\n   497\tline 497\n   498\tline 498\n   499\tline 499\n" +
		"   500\tnew A\n   501\tnew B\n" +
		"   502\tline 501\n   503\tline 502\n   504\tline 503\n   505\tline 504\n" +
		"Review the changes and make sure they are as expected. Edit the file again if necessary."
	assert.Equal(t, want, obs.Text())
	assert.Equal(t, &Change{Line: 500, Removed: 1, Added: 2}, out(obs).Change)
	assert.Equal(t, 701, out(obs).NumLines)

	t.Run("at the top", func(t *testing.T) {
		p := writeTemp(t, "g.txt", []byte("a\nb\n"))
		assert.Equal(t, "The file "+p+" has been edited. Here's the result of running `cat -n` on a snippet of "+p+":\n     1\tA\n     2\tb\n"+
			"Review the changes and make sure they are as expected. Edit the file again if necessary.",
			ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("a"), NewStr: ptr("A")}).Text())
	})
	t.Run("file emptied", func(t *testing.T) {
		p := writeTemp(t, "g.txt", []byte("only\n"))
		assert.Contains(t, ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("only\n")}).Text(), "The file is now empty.")
	})
}

func TestInsert(t *testing.T) {
	cases := []struct {
		name    string
		content string
		line    int
		text    string
		want    string
		errMsg  string
	}{
		{name: "top", content: "a\nb\n", line: 0, text: "x", want: "x\na\nb\n"},
		{name: "middle", content: "a\nb\n", line: 1, text: "x", want: "a\nx\nb\n"},
		{name: "end", content: "a\nb\n", line: 2, text: "x", want: "a\nb\nx\n"},
		{name: "end without final newline", content: "a\nb", line: 2, text: "c", want: "a\nb\nc"},
		{name: "end without final newline, text with newline", content: "a\nb", line: 2, text: "c\n", want: "a\nb\nc\n"},
		{name: "middle without final newline", content: "a\nb", line: 1, text: "x", want: "a\nx\nb"},
		{name: "several lines", content: "a\nb\n", line: 1, text: "x\ny", want: "a\nx\ny\nb\n"},
		{name: "trailing newline adds no blank line", content: "a\nb\n", line: 1, text: "x\ny\n", want: "a\nx\ny\nb\n"},
		{name: "empty text is a blank line", content: "a\nb\n", line: 1, text: "", want: "a\n\nb\n"},
		{name: "blank line at end without final newline", content: "a", line: 1, text: "", want: "a\n\n"},
		{name: "empty file", content: "", line: 0, text: "x", want: "x\n"},
		{name: "chinese into english", content: "hello\nworld\n", line: 1, text: "你好", want: "hello\n你好\nworld\n"},
		{name: "tabs kept", content: "a\n", line: 1, text: "\tb", want: "a\n\tb\n"},
		{name: "past the end", content: "a\nb\n", line: 3, text: "x",
			errMsg: "Invalid `insert_line` parameter: 3. It should be within the range of allowed values: [0, 2]"},
		{name: "negative", content: "a\nb\n", line: -1, text: "x", errMsg: "[0, 2]"},
		{name: "past the end of empty file", content: "", line: 1, text: "x", errMsg: "[0, 0]"},
	}
	e := newExec(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, "f.txt", []byte(c.content))
			obs := call(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(c.line), NewStr: ptr(c.text)})
			if c.errMsg != "" {
				require.True(t, obs.IsError)
				assert.Contains(t, obs.Text(), c.errMsg)
				assert.Equal(t, c.content, readString(t, p))
				return
			}
			require.False(t, obs.IsError, obs.Text())
			assert.Equal(t, c.want, readString(t, p))
		})
	}
	t.Run("snippet", func(t *testing.T) {
		var sb strings.Builder
		for i := 1; i <= 20; i++ {
			fmt.Fprintf(&sb, "l%d\n", i)
		}
		p := writeTemp(t, "f.txt", []byte(sb.String()))
		obs := ok(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(10), NewStr: ptr("X\nY")})
		want := "The file " + p + " has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n" +
			"     7\tl7\n     8\tl8\n     9\tl9\n    10\tl10\n    11\tX\n    12\tY\n    13\tl11\n    14\tl12\n    15\tl13\n    16\tl14\n" +
			"Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary."
		assert.Equal(t, want, obs.Text())
		assert.Equal(t, &Change{Line: 11, Added: 2}, out(obs).Change)
	})
}

func TestUndo(t *testing.T) {
	e := newExec(t)
	t.Run("no history", func(t *testing.T) {
		p := writeTemp(t, "f.txt", []byte("a\n"))
		assert.Equal(t, "No edit history found for "+p+".", bad(t, e, Action{Command: "undo_edit", Path: p}))
	})
	t.Run("undo restores each edit in turn", func(t *testing.T) {
		p := writeTemp(t, "f.txt", []byte("v0\n"))
		for i := 1; i <= 3; i++ {
			ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr(fmt.Sprintf("v%d", i-1)), NewStr: ptr(fmt.Sprintf("v%d", i))})
		}
		obs := ok(t, e, Action{Command: "undo_edit", Path: p})
		assert.Equal(t, "Last edit to "+p+" undone successfully. Here's the result of running `cat -n` on "+p+":\n     1\tv2\n", obs.Text())
		assert.Equal(t, "v3\n", *out(obs).OldContent)
		assert.Equal(t, "v2\n", *out(obs).NewContent)
		ok(t, e, Action{Command: "undo_edit", Path: p})
		ok(t, e, Action{Command: "undo_edit", Path: p})
		assert.Equal(t, "v0\n", readString(t, p))
		bad(t, e, Action{Command: "undo_edit", Path: p})
	})
	t.Run("last 10 edits only", func(t *testing.T) {
		p := writeTemp(t, "f.txt", []byte("0\n"))
		for i := 1; i <= 12; i++ {
			ok(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr(fmt.Sprint(i))})
		}
		for range 10 {
			ok(t, e, Action{Command: "undo_edit", Path: p})
		}
		assert.Equal(t, "No edit history found for "+p+".", bad(t, e, Action{Command: "undo_edit", Path: p}))
		assert.Equal(t, "2\n1\n0\n", readString(t, p))
	})
	t.Run("undo after create removes the file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "new.txt")
		ok(t, e, Action{Command: "create", Path: p, FileText: ptr("hello\n")})
		obs := ok(t, e, Action{Command: "undo_edit", Path: p})
		assert.Contains(t, obs.Text(), "Last edit to "+p+" undone successfully.")
		assert.Contains(t, obs.Text(), "has been removed")
		assert.NoFileExists(t, p)
		assert.Contains(t, bad(t, e, Action{Command: "undo_edit", Path: p}), "does not exist")
	})
	t.Run("create, edit, undo twice", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "new.txt")
		ok(t, e, Action{Command: "create", Path: p, FileText: ptr("a\n")})
		ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("a"), NewStr: ptr("b")})
		ok(t, e, Action{Command: "undo_edit", Path: p})
		assert.Equal(t, "a\n", readString(t, p))
		ok(t, e, Action{Command: "undo_edit", Path: p})
		assert.NoFileExists(t, p)
	})
	t.Run("history shared by symlink and target", func(t *testing.T) {
		p := writeTemp(t, "f.txt", []byte("a\n"))
		link := filepath.Join(filepath.Dir(p), "link.txt")
		require.NoError(t, os.Symlink("f.txt", link))
		ok(t, e, Action{Command: "str_replace", Path: link, OldStr: ptr("a"), NewStr: ptr("b")})
		ok(t, e, Action{Command: "undo_edit", Path: p})
		assert.Equal(t, "a\n", readString(t, p))
	})
	t.Run("undo restores exact bytes", func(t *testing.T) {
		orig := "\xEF\xBB\xBFx\r\ny\n"
		p := writeTemp(t, "f.txt", []byte(orig))
		ok(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(2), NewStr: ptr("z")})
		ok(t, e, Action{Command: "undo_edit", Path: p})
		assert.Equal(t, orig, readString(t, p))
	})
	t.Run("history memory budget", func(t *testing.T) {
		small := newExec(t, func(o *Options) { o.MaxHistoryBytes = 100 })
		p := writeTemp(t, "f.txt", []byte(strings.Repeat("a", 60)+"\n"))
		ok(t, small, Action{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr("1")})
		ok(t, small, Action{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr("2")}) // evicts the first snapshot
		ok(t, small, Action{Command: "undo_edit", Path: p})
		bad(t, small, Action{Command: "undo_edit", Path: p})
		assert.Equal(t, "1\n"+strings.Repeat("a", 60)+"\n", readString(t, p))
	})
}

func TestModeOwnerAndSymlinkKept(t *testing.T) {
	e := newExec(t)
	p := writeTemp(t, "run.sh", []byte("#!/bin/sh\necho a\n"))
	require.NoError(t, os.Chmod(p, 0o751))
	link := filepath.Join(t.TempDir(), "link.sh")
	require.NoError(t, os.Symlink(p, link))
	before, err := os.Stat(p)
	require.NoError(t, err)

	ok(t, e, Action{Command: "str_replace", Path: link, OldStr: ptr("echo a"), NewStr: ptr("echo b")})
	ok(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(2), NewStr: ptr("echo c")})
	ok(t, e, Action{Command: "undo_edit", Path: p})

	fi, err := os.Lstat(link)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink, "the symlink must stay a symlink")
	after, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o751), after.Mode().Perm())
	assert.Equal(t, statOwner(before), statOwner(after))
	assert.Equal(t, "#!/bin/sh\necho b\n", readString(t, p))
	assert.Empty(t, tempFiles(t, filepath.Dir(p)))
}

func TestStructuredContentBounded(t *testing.T) {
	e := newExec(t)
	p := writeTemp(t, "big.txt", []byte(strings.Repeat("x\n", MaxStructuredContent)))
	obs := ok(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr("top")})
	o := out(obs)
	assert.True(t, o.Omitted)
	assert.Nil(t, o.OldContent)
	assert.Nil(t, o.NewContent)
	assert.Equal(t, &Change{Line: 1, Added: 1}, o.Change)
	assert.Equal(t, MaxStructuredContent+1, o.NumLines)
}

func TestHistoryBudgetAcrossFiles(t *testing.T) {
	h := newHistory(10, 10)
	h.push("a", true, []byte("aaaa")) // oldest, evicted first
	h.push("b", true, []byte("bbbb"))
	h.push("a", true, []byte("cccc")) // 12 bytes > 10: the first "a" goes
	s, ok := h.pop("a")
	require.True(t, ok)
	assert.Equal(t, "cccc", string(s.data))
	_, ok = h.pop("a")
	assert.False(t, ok)
	s, ok = h.pop("b")
	require.True(t, ok)
	assert.Equal(t, "bbbb", string(s.data))
	assert.Zero(t, h.bytes)

	h.push("big", true, []byte("more than ten bytes")) // the newest is kept even alone over budget
	_, ok = h.pop("big")
	assert.True(t, ok)
}

// prev_exist tells whether the file was there before the call, on errors too.
func TestPrevExistOnErrors(t *testing.T) {
	e := newExec(t)
	dir := t.TempDir()
	existing := filepath.Join(dir, "there.txt")
	require.NoError(t, os.WriteFile(existing, []byte("x\n"), 0o644))
	cases := []struct {
		name string
		a    Action
		want bool
	}{
		{"view missing", Action{Command: "view", Path: filepath.Join(dir, "nope")}, false},
		{"str_replace missing", Action{Command: "str_replace", Path: filepath.Join(dir, "nope"), OldStr: ptr("a")}, false},
		{"create without parent", Action{Command: "create", Path: filepath.Join(dir, "x", "y.txt"), FileText: ptr("a")}, false},
		{"create without file_text", Action{Command: "create", Path: filepath.Join(dir, "new.txt")}, false},
		{"create existing", Action{Command: "create", Path: existing, FileText: ptr("a")}, true},
		{"str_replace no match", Action{Command: "str_replace", Path: existing, OldStr: ptr("zzz"), NewStr: ptr("a")}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := call(t, e, c.a)
			require.True(t, obs.IsError, obs.Text())
			assert.Equal(t, c.want, out(obs).PrevExist)
		})
	}
}
