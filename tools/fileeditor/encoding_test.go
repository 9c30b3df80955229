package fileeditor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func utf16Bytes(s string, bigEndian bool) []byte {
	out := []byte{0xFF, 0xFE}
	if bigEndian {
		out = []byte{0xFE, 0xFF}
	}
	for _, u := range utf16.Encode([]rune(s)) {
		if bigEndian {
			out = append(out, byte(u>>8), byte(u))
		} else {
			out = append(out, byte(u), byte(u>>8))
		}
	}
	return out
}

// mustEncode is the test's own single-byte encoder, independent of the
// package's tables for the characters it uses.
func latin1(s string) []byte {
	var b []byte
	for _, r := range s {
		if r > 0xFF {
			panic("not latin-1")
		}
		b = append(b, byte(r))
	}
	return b
}

func cyr1251(s string) []byte {
	var b []byte
	for _, r := range s {
		switch {
		case r < 0x80:
			b = append(b, byte(r))
		case r >= 'А' && r <= 'я':
			b = append(b, byte(r-'А'+0xC0))
		case r == 'ё':
			b = append(b, 0xB8)
		case r == 'Ё':
			b = append(b, 0xA8)
		default:
			panic("not in test cp1251")
		}
	}
	return b
}

func TestDetectEncoding(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		want encoding
		bin  bool
	}{
		{"ascii", []byte("plain text\n"), encUTF8, false},
		{"empty", nil, encUTF8, false},
		{"utf-8", []byte("naïve — 日本語\n"), encUTF8, false},
		{"utf-8 bom", append([]byte{0xEF, 0xBB, 0xBF}, "x\n"...), encUTF8BOM, false},
		{"utf-16le", utf16Bytes("hi\n", false), encUTF16LE, false},
		{"utf-16be", utf16Bytes("hi\n", true), encUTF16BE, false},
		{"latin-1", latin1("café résumé naïve\n"), encWindows1252, false},
		{"latin-1 german", latin1("Größe über Maß\n"), encWindows1252, false},
		{"cp1251", cyr1251("Привет, мир! Ёлка ёжик.\n"), encWindows1251, false},
		{"cp1251 with english", cyr1251("// Комментарий: function returns значение\n"), encWindows1251, false},
		{"stray invalid byte", []byte("mostly text \xff here\n"), encWindows1252, false},
		{"utf-8 with a stray byte", []byte("café, naïve \xff 世界\n"), encUTF8Escaped, false},
		{"more invalid than utf-8", []byte("caf\xe9 na\xefve r\xe9sum\xe9 — ok\n"), encWindows1252, false},
		{"escape range in the file", []byte("é \xff \xf4\x8f\xbf\xbf\n"), encWindows1252, false},
		{"nul", []byte("a\x00b"), 0, true},
		{"controls", []byte(strings.Repeat("\x01\x02\x03\x04x", 10)), 0, true},
		{"odd utf-16", []byte{0xFF, 0xFE, 'a'}, 0, true},
		{"bom but invalid utf-8", []byte{0xEF, 0xBB, 0xBF, 0xFF}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			enc, err := detectEncoding(c.data)
			if c.bin {
				var be errBinary
				assert.ErrorAs(t, err, &be)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, enc, enc.String())
		})
	}
	t.Run("utf-32 is not utf-16", func(t *testing.T) {
		_, err := decode([]byte{0xFF, 0xFE, 0, 0, 'a', 0, 0, 0}, encUTF16LE)
		assert.ErrorAs(t, err, new(errBinary))
	})
	t.Run("unpaired surrogate", func(t *testing.T) {
		_, err := decode([]byte{0xFF, 0xFE, 0x00, 0xD8, 'a', 0}, encUTF16LE)
		assert.Error(t, err)
	})
}

// Every byte round-trips through each single-byte code page, so bytes the
// edit does not touch are written back unchanged.
func TestSingleByteRoundTrip(t *testing.T) {
	all := make([]byte, 0, 256)
	for i := 1; i < 256; i++ {
		all = append(all, byte(i))
	}
	for _, enc := range []encoding{encWindows1251, encWindows1252} {
		s, err := decode(all, enc)
		require.NoError(t, err)
		b, err := encode(s, enc)
		require.NoError(t, err)
		assert.Equal(t, all, b, enc.String())
	}
	for _, enc := range []encoding{encUTF16LE, encUTF16BE} {
		data := utf16Bytes("x 🌍 ü\r\n", enc == encUTF16BE)
		s, err := decode(data, enc)
		require.NoError(t, err)
		assert.Equal(t, "x 🌍 ü\r\n", s)
		b, err := encode(s, enc)
		require.NoError(t, err)
		assert.Equal(t, data, b)
	}
}

func TestEncodingsEndToEnd(t *testing.T) {
	cases := []struct {
		name      string
		raw       []byte
		view      string // line 1 as shown
		old, new  string
		want      []byte
		encName   string
		insertRaw []byte // file after inserting "Ω" at 0... when representable
	}{
		{name: "utf-8 bom", raw: append([]byte{0xEF, 0xBB, 0xBF}, "grüße\nzwei\n"...), view: "grüße",
			old: "grüße", new: "tschüss", want: append([]byte{0xEF, 0xBB, 0xBF}, "tschüss\nzwei\n"...), encName: "utf-8 with BOM"},
		{name: "utf-16le", raw: utf16Bytes("héllo\r\nwörld\r\n", false), view: "héllo",
			old: "héllo\nwörld", new: "hi\nthere 🌍", want: utf16Bytes("hi\r\nthere 🌍\r\n", false), encName: "utf-16le with BOM"},
		{name: "utf-16be", raw: utf16Bytes("héllo\nwörld\n", true), view: "héllo",
			old: "wörld", new: "wereld", want: utf16Bytes("héllo\nwereld\n", true), encName: "utf-16be with BOM"},
		{name: "latin-1", raw: latin1("café résumé naïve\nfin\n"), view: "café résumé naïve",
			old: "naïve", new: "déjà vu", want: latin1("café résumé déjà vu\nfin\n"), encName: "windows-1252 (latin-1)"},
		{name: "cp1251", raw: cyr1251("Привет, мир!\nвторая строка\n"), view: "Привет, мир!",
			old: "мир", new: "всем ёжикам", want: cyr1251("Привет, всем ёжикам!\nвторая строка\n"), encName: "windows-1251"},
	}
	e := newExec(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, "f.txt", c.raw)
			obs := ok(t, e, Action{Command: "view", Path: p})
			assert.Contains(t, obs.Text(), "     1\t"+c.view+"\n")
			assert.Equal(t, c.encName, out(obs).Encoding)
			ranged := ok(t, e, Action{Command: "view", Path: p, ViewRange: []int{2, 2}})
			assert.NotContains(t, ranged.Text(), c.view)

			ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr(c.old), NewStr: ptr(c.new)})
			got, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)

			ok(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr(c.view)})
			ok(t, e, Action{Command: "undo_edit", Path: p})
			ok(t, e, Action{Command: "undo_edit", Path: p})
			got, err = os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, c.raw, got)
		})
	}
}

func TestUnencodableEditRefused(t *testing.T) {
	e := newExec(t)
	raw := cyr1251("Привет\n")
	p := writeTemp(t, "f.txt", raw)
	msg := bad(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("Привет"), NewStr: ptr("Привет → 世界")})
	assert.Contains(t, msg, "No change was made: "+p+" is encoded as windows-1251")
	assert.Contains(t, msg, `'→' (U+2192)`)
	assert.Contains(t, msg, `'世' (U+4E16)`)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, raw, got)
}

func TestCreateWritesUTF8(t *testing.T) {
	e := newExec(t)
	p := filepath.Join(t.TempDir(), "new.txt")
	ok(t, e, Action{Command: "create", Path: p, FileText: ptr("Привет\n")})
	assert.Equal(t, "Привет\n", readString(t, p))
}

func TestLineEndings(t *testing.T) {
	cases := []struct {
		name    string
		content string
		a       Action // Path filled in
		want    string
	}{
		{"crlf old_str with LF", "one\r\ntwo\r\nthree\r\n",
			Action{Command: "str_replace", OldStr: ptr("one\ntwo\n"), NewStr: ptr("1\n2\n")}, "1\r\n2\r\nthree\r\n"},
		{"crlf old_str with CRLF", "one\r\ntwo\r\nthree\r\n",
			Action{Command: "str_replace", OldStr: ptr("two\r\nthree"), NewStr: ptr("2\r\n3")}, "one\r\n2\r\n3\r\n"},
		{"crlf new lines get CRLF", "a\r\nb\r\n",
			Action{Command: "str_replace", OldStr: ptr("a"), NewStr: ptr("a\nx\ny")}, "a\r\nx\r\ny\r\nb\r\n"},
		{"crlf match never splits a CRLF", "a\r\nb\r\n",
			Action{Command: "str_replace", OldStr: ptr("a\n"), NewStr: ptr("")}, "b\r\n"},
		{"crlf insert", "a\r\nb\r\n",
			Action{Command: "insert", InsertLine: ptr(1), NewStr: ptr("x\ny")}, "a\r\nx\r\ny\r\nb\r\n"},
		{"crlf insert at end without final newline", "a\r\nb",
			Action{Command: "insert", InsertLine: ptr(2), NewStr: ptr("c")}, "a\r\nb\r\nc"},
		{"mixed file keeps other lines", "a\r\nb\nc\r\nd\r\n",
			Action{Command: "str_replace", OldStr: ptr("c\nd"), NewStr: ptr("C\nD")}, "a\r\nb\nC\r\nD\r\n"},
		{"lf file stays lf", "a\nb\n",
			Action{Command: "str_replace", OldStr: ptr("a\r\nb"), NewStr: ptr("x\r\ny")}, "x\ny\n"},
	}
	e := newExec(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, "f.txt", []byte(c.content))
			c.a.Path = p
			ok(t, e, c.a)
			assert.Equal(t, c.want, readString(t, p))
			ok(t, e, Action{Command: "undo_edit", Path: p})
			assert.Equal(t, c.content, readString(t, p))
		})
	}
	t.Run("only line endings differ", func(t *testing.T) {
		p := writeTemp(t, "f.txt", []byte("a\r\nb\r\n"))
		assert.Contains(t, bad(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("a\r\n"), NewStr: ptr("a\n")}), "differ only in their line endings")
	})
	t.Run("crlf snippet has no CR", func(t *testing.T) {
		p := writeTemp(t, "f.txt", []byte("a\r\nb\r\n"))
		obs := ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("b"), NewStr: ptr("c")})
		assert.NotContains(t, obs.Text(), "\r")
		assert.Equal(t, "CRLF", out(obs).LineEnding)
	})
}

// Upstream refused a mostly-text file with two invalid UTF-8 bytes as
// binary. Here it is viewable and an edit keeps those bytes as they were.
// A UTF-8 file with a stray byte reads as UTF-8 (not every "é" as "Ã©"),
// so text copied from grep or cat matches, and the stray byte is written
// back as it was.
func TestUTF8WithStrayByte(t *testing.T) {
	e := newExec(t)
	raw := []byte("name = \"café\"\nbad = \xff\xfe\nwörld = 1\n")
	p := writeTemp(t, "f.py", raw)
	obs := ok(t, e, Action{Command: "view", Path: p})
	assert.Contains(t, obs.Text(), "name = \"café\"")
	assert.Contains(t, obs.Text(), "bad = \U0010FFFF\U0010FFFE")
	assert.Equal(t, encUTF8Escaped.String(), out(obs).Encoding)
	ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("wörld = 1"), NewStr: ptr("wörld = 2 # ü")})
	ok(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(0), NewStr: ptr("# 世界")})
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, []byte("# 世界\nname = \"café\"\nbad = \xff\xfe\nwörld = 2 # ü\n"), got)
	ok(t, e, Action{Command: "undo_edit", Path: p})
	ok(t, e, Action{Command: "undo_edit", Path: p})
	got, err = os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, raw, got)
}

func TestStrayBytesKept(t *testing.T) {
	e := newExec(t)
	raw := []byte("config = 1\nname = \xff\xfe\n")
	p := writeTemp(t, "f.conf", raw)
	ok(t, e, Action{Command: "view", Path: p})
	ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("config = 1"), NewStr: ptr("config = 2")})
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, []byte("config = 2\nname = \xff\xfe\n"), got)
}
