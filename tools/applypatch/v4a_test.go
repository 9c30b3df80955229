package applypatch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func apply(t *testing.T, text, diff string) Applied {
	t.Helper()
	a, err := ApplyDiff(text, diff)
	require.NoError(t, err)
	return a
}

func hunkErr(t *testing.T, text, diff string) *HunkError {
	t.Helper()
	_, err := ApplyDiff(text, diff)
	var he *HunkError
	require.ErrorAs(t, err, &he)
	return he
}

const pyFile = `class A:
    def m(self):
        return 1

class B:
    def m(self):
        return 1
`

func TestApplyDiffPlainHunk(t *testing.T) {
	a := apply(t, "one\ntwo\nthree\nfour\n", "@@\n one\n-two\n+2\n three\n")
	require.Equal(t, "one\n2\nthree\nfour\n", a.Text)
	require.Equal(t, 1, a.Hunks)
	require.Zero(t, a.Fuzz)
}

func TestApplyDiffFirstHunkNeedsNoHeader(t *testing.T) {
	a := apply(t, "a\nb\nc\n", " a\n-b\n+B\n")
	require.Equal(t, "a\nB\nc\n", a.Text)
}

func TestApplyDiffAnchor(t *testing.T) {
	// Without the anchor the first "return 1" (class A's) would change.
	a := apply(t, pyFile, "@@ class B:\n     def m(self):\n-        return 1\n+        return 2\n")
	require.Equal(t, strings.Replace(pyFile, "class B:\n    def m(self):\n        return 1", "class B:\n    def m(self):\n        return 2", 1), a.Text)
}

func TestApplyDiffStackedAnchors(t *testing.T) {
	src := "class A:\n    def m(self):\n        x = 1\n    def n(self):\n        x = 1\nclass B:\n    def m(self):\n        x = 1\n    def n(self):\n        x = 1\n"
	a := apply(t, src, "@@ class B:\n@@     def n(self):\n-        x = 1\n+        x = 9\n")
	require.Equal(t, "class A:\n    def m(self):\n        x = 1\n    def n(self):\n        x = 1\nclass B:\n    def m(self):\n        x = 1\n    def n(self):\n        x = 9\n", a.Text)
	// Each anchor narrows from the one before: def n after class A only.
	a = apply(t, src, "@@ class A:\n@@     def n(self):\n-        x = 1\n+        x = 7\n")
	require.Equal(t, "class A:\n    def m(self):\n        x = 1\n    def n(self):\n        x = 7\nclass B:\n    def m(self):\n        x = 1\n    def n(self):\n        x = 1\n", a.Text)
}

func TestApplyDiffAnchorNotThere(t *testing.T) {
	he := hunkErr(t, pyFile, "@@ class C:\n-        return 1\n+        return 2\n")
	require.Equal(t, KindInvalidAnchor, he.Kind)
	require.Equal(t, 1, he.Hunk)
	require.Equal(t, []string{"class C:"}, he.Lines)
	require.Contains(t, he.Error(), "Invalid Anchor")
}

func TestApplyDiffFuzzLevels(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		fuzz       int
	}{
		{"exact", "a\nb\nc\n", FuzzExact},
		{"trailing space in the file", "a  \nb\t\nc\n", FuzzTrailing},
		{"indentation differs", "  a\n\tb\nc\n", FuzzSurrounded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := apply(t, tc.text, "@@\n a\n-b\n+B\n c\n")
			require.Equal(t, tc.fuzz, a.Fuzz)
			lines := strings.Split(a.Text, "\n")
			require.Equal(t, "B", lines[1], "the changed line is the diff's")
			require.Equal(t, strings.Split(tc.text, "\n")[0], lines[0], "context lines keep the file's text")
		})
	}
}

func TestApplyDiffExactPreferredOverFuzzy(t *testing.T) {
	// A fuzzy match comes first in the file, the exact one later: exact wins.
	a := apply(t, "x \ny\nx\ny\n", "@@\n-x\n+X\n y\n")
	require.Equal(t, "x \ny\nX\ny\n", a.Text)
	require.Zero(t, a.Fuzz)
}

func TestApplyDiffEOF(t *testing.T) {
	src := "end\nmiddle\nend\n"
	a := apply(t, src, "@@\n-end\n+END\n*** End of File\n")
	require.Equal(t, "end\nmiddle\nEND\n", a.Text, "an End of File hunk matches the last occurrence")
	require.Zero(t, a.Fuzz)
	// Without the marker the first occurrence changes.
	require.Equal(t, "END\nmiddle\nend\n", apply(t, src, "@@\n-end\n+END\n").Text)
	// Adding at the end of a file without a final newline.
	require.Equal(t, "a\nb\nc", apply(t, "a\nb", "@@\n b\n+c\n*** End of File\n").Text)
}

func TestApplyDiffEOFFallbackAndFailure(t *testing.T) {
	// The context is there, but not at the end: applied, with EOF fuzz.
	a := apply(t, "a\nb\nc\n", "@@\n-a\n+A\n*** End of File\n")
	require.Equal(t, "A\nb\nc\n", a.Text)
	require.Equal(t, FuzzEOF, a.Fuzz)
	he := hunkErr(t, "a\nb\nc\n", "@@\n-zzz\n+A\n*** End of File\n")
	require.Equal(t, KindInvalidEOFContext, he.Kind)
	require.Equal(t, []string{"zzz"}, he.Lines)
}

func TestApplyDiffCRLF(t *testing.T) {
	src := "one\r\ntwo\r\nthree\r\n"
	a := apply(t, src, "@@\n one\n-two\n+2\n+2.5\n three\n")
	require.Equal(t, "one\r\n2\r\n2.5\r\nthree\r\n", a.Text)
	// A diff written with CRLF applies the same.
	require.Equal(t, "one\r\n2\r\n2.5\r\nthree\r\n", apply(t, src, "@@\r\n one\r\n-two\r\n+2\r\n+2.5\r\n three\r\n").Text)
	// A mixed file: untouched lines keep their own ending, new ones the dominant.
	mixed := "a\r\nb\r\nc\nd\r\n"
	require.Equal(t, "a\r\nB\r\nc\nd\r\n", apply(t, mixed, "@@\n a\n-b\n+B\n").Text)
}

func TestApplyDiffUnicode(t *testing.T) {
	src := "naïve = \"café\"\n日本語 = 1\nemoji = \"🎉\"\n"
	a := apply(t, src, "@@\n naïve = \"café\"\n-日本語 = 1\n+日本語 = 2\n emoji = \"🎉\"\n")
	require.Equal(t, "naïve = \"café\"\n日本語 = 2\nemoji = \"🎉\"\n", a.Text)
	// Unicode spaces count as whitespace for the fuzzy levels.
	a = apply(t, "\u00a0x\u3000\ny\n", "@@\n-x\n+X\n y\n")
	require.Equal(t, "X\ny\n", a.Text)
	require.Equal(t, FuzzSurrounded, a.Fuzz)
}

func TestApplyDiffMatchesTwice(t *testing.T) {
	src := "f()\nx = 1\nf()\nx = 1\n"
	// One hunk: the first occurrence after the start.
	require.Equal(t, "f()\nx = 2\nf()\nx = 1\n", apply(t, src, "@@\n f()\n-x = 1\n+x = 2\n").Text)
	// Two hunks: the second is sought after the first.
	a := apply(t, src, "@@\n f()\n-x = 1\n+x = 2\n@@\n f()\n-x = 1\n+x = 3\n")
	require.Equal(t, "f()\nx = 2\nf()\nx = 3\n", a.Text)
	require.Equal(t, 2, a.Hunks)
	// The same hunk twice cannot match one place twice: the second finds the other.
	a = apply(t, src, "@@\n-x = 1\n+y\n@@\n-x = 1\n+z\n")
	require.Equal(t, "f()\ny\nf()\nz\n", a.Text)
}

func TestApplyDiffContextNotThere(t *testing.T) {
	he := hunkErr(t, "a\nb\nc\n", "@@\n a\n-b\n+B\n@@\n q\n-r\n+R\n")
	require.Equal(t, KindInvalidContext, he.Kind)
	require.Equal(t, 2, he.Hunk)
	require.Equal(t, []string{"q", "r"}, he.Lines)
	msg := he.Error()
	require.Contains(t, msg, "hunk 2: Invalid Context")
	require.Contains(t, msg, "\nq\nr")
}

func TestApplyDiffContextBeforeCursorNotReused(t *testing.T) {
	// The second hunk's context lies before the first hunk: not found.
	he := hunkErr(t, "a\nb\nc\nd\n", "@@\n c\n-d\n+D\n@@\n a\n-b\n+B\n")
	require.Equal(t, KindInvalidContext, he.Kind)
	require.Equal(t, 2, he.Hunk)
}

func TestApplyDiffEmptyFile(t *testing.T) {
	require.Equal(t, "hello\nworld\n", apply(t, "", "@@\n+hello\n+world\n").Text)
	require.Equal(t, "hello\n", apply(t, "", "+hello\n").Text)
	he := hunkErr(t, "", "@@\n-gone\n")
	require.Equal(t, KindInvalidContext, he.Kind)
}

func TestApplyDiffNoFinalNewline(t *testing.T) {
	// Kept without one when the last line changes...
	require.Equal(t, "a\nB", apply(t, "a\nb", "@@\n a\n-b\n+B\n").Text)
	// ... and when a middle line changes.
	require.Equal(t, "A\nb", apply(t, "a\nb", "@@\n-a\n+A\n b\n").Text)
	// Deleting the last line leaves the one before it without one either.
	require.Equal(t, "a", apply(t, "a\nb", "@@\n a\n-b\n").Text)
}

func TestApplyDiffDeleteAndInsertOnly(t *testing.T) {
	require.Equal(t, "a\nc\n", apply(t, "a\nb\nc\n", "@@\n a\n-b\n c\n").Text)
	require.Equal(t, "a\nb\nnew\nc\n", apply(t, "a\nb\nc\n", "@@\n b\n+new\n c\n").Text)
	// Several changes in one hunk.
	require.Equal(t, "A\nb\nC\n", apply(t, "a\nb\nc\n", "@@\n-a\n+A\n b\n-c\n+C\n").Text)
}

func TestApplyDiffBlankContextLine(t *testing.T) {
	// An empty diff line is an empty context line whose space was lost.
	require.Equal(t, "a\n\nB\n", apply(t, "a\n\nb\n", "@@\n a\n\n-b\n+B\n").Text)
}

func TestApplyDiffInvalidLines(t *testing.T) {
	he := hunkErr(t, "a\nb\n", "@@\n a\n?b\n")
	require.Equal(t, KindInvalidLine, he.Kind)
	require.Equal(t, []string{"?b"}, he.Lines)
	he = hunkErr(t, "a\nb\n", "@@\n a\n*** Bogus\n")
	require.Equal(t, KindInvalidLine, he.Kind)
	// After the first hunk, a hunk must open with @@.
	he = hunkErr(t, "a\nb\nc\n", "@@\n-a\n+A\n*** End of File\n-b\n")
	require.Equal(t, KindInvalidLine, he.Kind)
	he = hunkErr(t, "a\n", "@@\n@@\n")
	require.Equal(t, KindEmptySection, he.Kind)
}

func TestCreateText(t *testing.T) {
	s, err := CreateText("+line one\n+\n+line three\n")
	require.NoError(t, err)
	require.Equal(t, "line one\n\nline three\n", s)
	s, err = CreateText("+a\r\n+b\r\n")
	require.NoError(t, err)
	require.Equal(t, "a\r\nb\r\n", s)
	s, err = CreateText("")
	require.NoError(t, err)
	require.Empty(t, s)
	_, err = CreateText("+a\nb\n")
	var he *HunkError
	require.ErrorAs(t, err, &he)
	require.Equal(t, KindInvalidAddLine, he.Kind)
	require.Equal(t, 2, he.Line)
}

func TestParsePatch(t *testing.T) {
	ops, err := ParsePatch(`*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-print("Hi")
+print("Hello, world!")
*** Delete File: obsolete.txt
*** End Patch
`)
	require.NoError(t, err)
	require.Len(t, ops, 3)
	require.Equal(t, Operation{Type: OpCreate, Path: "hello.txt", Diff: ptr("+Hello world\n")}, ops[0])
	require.Equal(t, Operation{Type: OpUpdate, Path: "src/app.py", MoveTo: ptr("src/main.py"),
		Diff: ptr("@@ def greet():\n-print(\"Hi\")\n+print(\"Hello, world!\")\n")}, ops[1])
	require.Equal(t, Operation{Type: OpDelete, Path: "obsolete.txt"}, ops[2])
	for _, op := range ops {
		require.NoError(t, op.Check())
	}
}

func TestParsePatchErrors(t *testing.T) {
	for _, tc := range []struct{ patch, want string }{
		{"", "must start with"},
		{"*** Begin Patch\n*** Add File: a\n+x\n", "must end with"},
		{"*** Begin Patch\n*** End Patch", "no file sections"},
		{"*** Begin Patch\nhello\n*** End Patch", "not a file header"},
		{"*** Begin Patch\n*** Add File: a\n*** End Patch", "has no lines"},
		{"*** Begin Patch\n*** Delete File: a\n-x\n*** End Patch", "takes no lines"},
		{"*** Begin Patch\n*** Update File: a\n*** End Patch", "has no hunks"},
		{"*** Begin Patch\n*** Add File:  \n+x\n*** End Patch", "names no file"},
	} {
		_, err := ParsePatch(tc.patch)
		require.ErrorContains(t, err, tc.want, "patch %q", tc.patch)
	}
}

func TestOperationCheck(t *testing.T) {
	for _, tc := range []struct {
		op   Operation
		want string
	}{
		{Operation{Type: "rename_file", Path: "a"}, "invalid apply_patch operation type"},
		{Operation{Type: OpCreate, Path: "a"}, "missing its diff"},
		{Operation{Type: OpUpdate, Path: "a"}, "missing its diff"},
		{Operation{Type: OpDelete, Path: "a", Diff: ptr("+x")}, "takes no diff"},
		{Operation{Type: OpDelete, Path: " "}, "missing a path"},
		{Operation{Type: OpCreate, Path: "a", Diff: ptr("+x"), MoveTo: ptr("b")}, "cannot take move_to"},
		{Operation{Type: OpUpdate, Path: "a", Diff: ptr(""), MoveTo: ptr("")}, "empty move_to"},
	} {
		require.ErrorContains(t, tc.op.Check(), tc.want)
	}
}

func ptr[T any](v T) *T { return &v }
