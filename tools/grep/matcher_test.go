package grep

import (
	"math/rand/v2"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// naiveLines is the reference: the numbers of the lines the regexp matches
// when run on each line alone.
func naiveLines(t *testing.T, pattern string, caseSensitive bool, text string) []int {
	flags := "(?m)"
	if !caseSensitive {
		flags = "(?mi)"
	}
	re := regexp.MustCompile(flags + pattern)
	var got []int
	if text == "" {
		return nil // an empty file has no lines
	}
	lines := strings.Split(text, "\n")
	if strings.HasSuffix(text, "\n") {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		if re.MatchString(l) {
			got = append(got, i+1)
		}
	}
	return got
}

func scanLines(t *testing.T, m *matcher, text string) []int {
	var got []int
	sc := m.newScanner()
	sc.reset()
	b := []byte(text)
	for pos := 0; pos < len(b); {
		ls, le, ok := sc.nextLine(b, pos)
		if !ok {
			break
		}
		got = append(got, strings.Count(text[:ls], "\n")+1)
		pos = le + 1
	}
	return got
}

var matcherPatterns = []string{
	"foo", "FOO", "Foo", "foo|bar", "^foo", "bar$", "^$", "", "x*", "o+b", `\bfoo\b`,
	`func\s+\w+`, `f.o`, `[0-9]+`, `[0-9]{2}-[0-9]{2}`, `\d{4}`, "sk", "task", "KELVIN", "k",
	"ſ", "straße", "STRASSE", `(foo|bar)baz`, `a(b|c)d`, `(?-i)Foo`, `(?i)FOO`, `\s+$`,
	"foo.*bar", "(ab)+", "q[a-z]+", `\bq\w+`, "é", "É", `[[:upper:]]{3}`, "r\u00e9sum\u00e9",
	`\x00`, `.`, `\S`, "ba(r|z)qux|quux", "one|two|three|four|five|six",
}

var matcherTexts = []string{
	"",
	"\n",
	"foo",
	"foo\n",
	"bar\nfoo\n",
	"xfoo\nfoobar\nbarfoo\nFOO\nfOo bar\n",
	"line one\n\nline three\r\nfoo  \nbarbaz\nfoobaz\n",
	"task TASK taſk\nKelvin \u212Aelvin\nSK ſk\n",
	"straße\nSTRASSE\nStraße\n",
	"2024-03-15\nabc 12-34 def\n1234\n",
	"func  main() {\n\tfuncx\nfunc\n}\n",
	"résumé\nRÉSUMÉ\né É\n",
	"abd acd aed\nababab\n",
	"qux\nquux\nbarqux\nbazqux\n",
	"one\ntwo three\nfive\nsix seven\n",
	"no newline at the end",
}

func TestMatcherAgreesWithLineByLineRegexp(t *testing.T) {
	for _, cs := range []bool{false, true} {
		for _, p := range matcherPatterns {
			m, err := compilePattern(p, cs)
			require.NoError(t, err, p)
			for _, text := range matcherTexts {
				want := naiveLines(t, p, cs, text)
				assert.Equal(t, want, scanLines(t, m, text), "pattern %q case-sensitive=%v text %q", p, cs, text)
			}
		}
	}
}

func TestMatcherRandomText(t *testing.T) {
	t.Parallel()
	// Random text over a small alphabet that makes needles and first bytes
	// hit often, checked against the line-by-line reference.
	rng := rand.New(rand.NewPCG(7, 9))
	alphabet := []rune("fobarFOBAR kKſ\u212A\n\n-09é")
	for range 300 {
		var b strings.Builder
		for range rng.IntN(200) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		text := b.String()
		for _, p := range []string{"foo", "fob|rab", "ok", "k+", "^a", "r$", `[0-9]-`, "o.a", "bar(f|k)"} {
			for _, cs := range []bool{false, true} {
				m, err := compilePattern(p, cs)
				require.NoError(t, err)
				require.Equal(t, naiveLines(t, p, cs, text), scanLines(t, m, text), "pattern %q cs=%v text %q", p, cs, text)
			}
		}
	}
}

func TestPrefilterChoice(t *testing.T) {
	cases := []struct {
		pattern  string
		cs       bool
		needles  []string // the scanned-for set
		filters  int
		first    bool // a first-byte set is used
		exact    bool
		newlines bool
	}{
		{pattern: "ConnectionPool", cs: true, needles: []string{"ConnectionPool"}, exact: true},
		{pattern: "ConnectionPool", needles: []string{"connectionpool"}, exact: true},
		{pattern: `func\s+\w+Pool\(`, cs: true, needles: []string{"Pool("}, filters: 1},
		{pattern: "foo|barbaz", cs: true, needles: []string{"foo", "barbaz"}},
		{pattern: "task", needles: []string{"ta"}}, // 's' and 'k' fold to non-ASCII
		{pattern: "(?-i)task", needles: []string{"task"}, exact: true},
		{pattern: `\bq\w+`, first: true},
		{pattern: `[0-9]{4}-`, cs: true}, // ten first bytes: the DFA scans
		{pattern: `\w+`},
		{pattern: `x*`},
	}
	for _, c := range cases {
		m, err := compilePattern(c.pattern, c.cs)
		require.NoError(t, err, c.pattern)
		var needles []string
		for _, f := range m.finders {
			needles = append(needles, string(f.needle))
		}
		assert.Equal(t, c.needles, needles, c.pattern)
		assert.Len(t, m.filters, c.filters, c.pattern)
		assert.Equal(t, c.first, m.first != nil, c.pattern)
		assert.Equal(t, c.exact, m.exact, c.pattern)
	}
}

func TestPatternErrors(t *testing.T) {
	cases := []struct{ pattern, want string }{
		{"(?=foo)", "Lookahead and lookbehind are not supported"},
		{"(?<!foo)bar", "Lookahead and lookbehind are not supported"},
		{`(a)\1`, "Backreferences are not supported"},
		{"(foo", "missing closing )"},
		{"foo)", "unexpected )"},
		{"[abc", "missing closing ]"},
		{"*foo", "missing argument to repetition operator"},
		{`\p{Nope}`, "invalid character class range"},
		{"a\nb", "matches a newline"},
		{`a\nb`, "matches a newline"},
		{`\<foo\>`, "`\\<` is a GNU grep word boundary"},
		{`foo\>`, "use \\b instead"},
		{`[a]\<`, "word boundary"},
	}
	for _, c := range cases {
		_, err := compilePattern(c.pattern, false)
		require.Error(t, err, c.pattern)
		assert.Contains(t, err.Error(), c.want, c.pattern)
	}
	// A backslash-angle inside a class, or after an escaped backslash, is
	// a literal angle bracket, as RE2 reads it.
	for _, ok := range []string{`[\<>]`, `\\<`, `[]\<]`, `[^\>]x`, `[[:alpha:]\<]`, `a<b>`} {
		_, err := compilePattern(ok, false)
		assert.NoError(t, err, ok)
	}
}

func TestFirstByteSetSkipsEmptyAndAny(t *testing.T) {
	for _, p := range []string{"", "a*", ".x", `\w+`, "(a|)"} {
		re, err := syntax.Parse(p, syntax.Perl)
		require.NoError(t, err)
		assert.Nil(t, firstByteSet(re.Simplify()), p)
	}
}

func TestDFAAgreesWithRegexp(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	patterns := []string{
		`\bab`, `ab\b`, `\Bb`, `^a`, `b$`, `^$`, `^a*$`, `a.b`, `(a|b)*c`, `[^a]b`, `\w+\s`, `^\s*$`,
		`é+`, `[a-c]{2,3}`, `(?i)AB`, `x?y?`, `\Aa`, `b\z`, `(ab|ba)+$`, `[[:upper:]]{2}`,
	}
	alphabet := []rune("abcABC é\n\nxyz\t")
	for _, p := range patterns {
		m, err := compilePattern(p, true)
		require.NoError(t, err, p)
		for range 200 {
			var b strings.Builder
			for range rng.IntN(60) {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			text := b.String()
			require.Equal(t, naiveLines(t, p, true, text), scanLines(t, m, text), "pattern %q text %q", p, text)
		}
	}
}

func TestDFAFallsBackWhenStatesExplode(t *testing.T) {
	t.Parallel()
	// The DFA of "an a 14 characters from the end" needs 2^15 states.
	p := `(a|b)*a(a|b){14}x`
	m, err := compilePattern(p, true)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	for i := range 200000 {
		b.WriteByte("ab"[rng.IntN(2)])
		if i%5000 == 4999 {
			b.WriteString("x\n")
		}
	}
	text := b.String()
	sc := m.newScanner()
	want := naiveLines(t, p, true, text)
	assert.Equal(t, want, scanLines(t, m, text))
	// A fresh scanner hits the state limit and uses regexp from then on.
	sc.reset()
	_, _, _ = sc.nextLine([]byte(text), 0)
	assert.True(t, sc.dfa.failed)
}
