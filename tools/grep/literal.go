package grep

import (
	"bytes"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// maxNeedles bounds the alternatives of a prefilter ("foo|bar|baz"): each
// is one more pass over the text, and past this the DFA alone is as fast.
const maxNeedles = 4

// needle is a literal that every match of the pattern contains. A folded
// needle is ASCII, stored lower-case, and matches in any ASCII case.
type needle struct {
	b    []byte
	fold bool
}

// requiredNeedles returns literals of which at least one occurs in every
// match of re (a set: one per alternative), or nil if it knows none worth
// searching for. Scanning for them with bytes.Index/IndexByte and running
// the regexp only on the lines they hit is what makes grep fast. others are
// further sets that a match must also contain (the other literals of a
// top-level concatenation): a line that lacks one is rejected before the
// regexp runs.
func requiredNeedles(re *syntax.Regexp) (best []needle, others [][]needle) {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	var sets [][]needle
	if re.Op == syntax.OpConcat {
		for _, sub := range re.Sub {
			if r := required(sub); score(r) >= 2 {
				sets = append(sets, r)
			}
		}
	} else if r := required(re); score(r) >= 2 {
		sets = append(sets, r)
	}
	if len(sets) == 0 {
		return nil, nil
	}
	bi := 0
	for i, set := range sets {
		if better(set, sets[bi]) {
			bi = i
		}
	}
	return sets[bi], append(sets[:bi:bi], sets[bi+1:]...)
}

// better prefers the set with the longer shortest needle, then the one
// with fewer needles, then the one whose rarest byte is rarer.
func better(a, b []needle) bool {
	if sa, sb := score(a), score(b); sa != sb {
		return sa > sb
	}
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return rarity(a) < rarity(b)
}

// rarity is the rank of the most common "rarest byte" of a set's needles.
func rarity(set []needle) int {
	r := 0
	for _, n := range set {
		best := 1 << 30
		for _, c := range n.b {
			best = min(best, byteRank(c))
		}
		r = max(r, best)
	}
	return r
}

func required(re *syntax.Regexp) []needle {
	switch re.Op {
	case syntax.OpLiteral:
		if n, ok := literalNeedle(re.Rune, re.Flags&syntax.FoldCase != 0); ok {
			return []needle{n}
		}
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []needle
		for _, sub := range re.Sub {
			if r := required(sub); best == nil || r != nil && better(r, best) {
				best = r
			}
		}
		return best
	case syntax.OpAlternate:
		var out []needle
		for _, sub := range re.Sub {
			r := required(sub)
			if r == nil {
				return nil
			}
			out = append(out, r...)
		}
		if len(out) > maxNeedles {
			return nil
		}
		return out
	}
	return nil
}

// score rates a needle set by its shortest needle: longer needles hit less
// often, up to a point.
func score(set []needle) int {
	if len(set) == 0 {
		return 0
	}
	m := len(set[0].b)
	for _, n := range set[1:] {
		m = min(m, len(n.b))
	}
	return min(m, 6)
}

// literalNeedle turns a literal of the parsed pattern into a needle. A
// case-folded literal can only be searched byte-wise where every case
// variant of its letters is ASCII: 'k' also matches U+212A KELVIN SIGN and
// 's' U+017F LONG S, so the longest run of safe runes is used instead.
func literalNeedle(runes []rune, fold bool) (needle, bool) {
	if !fold {
		return needle{b: []byte(string(runes))}, len(runes) > 0
	}
	var best, cur []byte
	for _, r := range runes {
		if !asciiFoldSafe(r) {
			if len(cur) > len(best) {
				best = cur
			}
			cur = nil
			continue
		}
		cur = append(cur, lowerASCII(byte(r)))
	}
	if len(cur) > len(best) {
		best = cur
	}
	return needle{b: best, fold: true}, len(best) > 0
}

func asciiFoldSafe(r rune) bool {
	if r >= utf8.RuneSelf {
		return false
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

func upperASCII(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// finder searches for one needle.
type finder struct {
	needle []byte
	fold   bool
	// For a folded needle: the position of its rarest byte and that
	// byte's two cases, located with IndexByte and then verified.
	rare     int
	lo, up   byte
	singleUp bool // lo == up (not a letter): one IndexByte pass
}

func newFinder(n needle) *finder {
	f := &finder{needle: n.b, fold: n.fold}
	if f.fold {
		best := 1 << 30
		for i, c := range n.b {
			if r := byteRank(c); r < best {
				best, f.rare = r, i
			}
		}
		f.lo, f.up = n.b[f.rare], upperASCII(n.b[f.rare])
		f.singleUp = f.lo == f.up
	}
	return f
}

// index returns the offset of the first occurrence of the needle in hay,
// or -1.
func (f *finder) index(hay []byte) int {
	if !f.fold {
		return bytes.Index(hay, f.needle)
	}
	n := len(f.needle)
	nextLo, nextUp := -1, -1 // next positions of each case, -1: not looked up
	for i := f.rare; i < len(hay); {
		if nextLo < i {
			nextLo = indexFrom(hay, f.lo, i)
		}
		c := nextLo
		if !f.singleUp {
			if nextUp < i {
				nextUp = indexFrom(hay, f.up, i)
			}
			c = min(c, nextUp)
		}
		if c >= len(hay) {
			return -1
		}
		start := c - f.rare
		if start+n <= len(hay) && equalFoldASCII(hay[start:start+n], f.needle) {
			return start
		}
		i = c + 1
	}
	return -1
}

// indexFrom is IndexByte from offset i, with len(hay) for "absent".
func indexFrom(hay []byte, c byte, i int) int {
	j := bytes.IndexByte(hay[i:], c)
	if j < 0 {
		return len(hay)
	}
	return i + j
}

// equalFoldASCII compares s with the lower-case needle, ignoring ASCII case.
func equalFoldASCII(s, lower []byte) bool {
	for i, c := range lower {
		if s[i] != c && lowerASCII(s[i]) != c {
			return false
		}
	}
	return true
}

// byteRank estimates how common a byte is in source code and prose (higher
// is more common) so the rarest byte of a needle anchors the search.
func byteRank(c byte) int {
	l := lowerASCII(c)
	switch {
	case c == ' ' || c == '\n' || c == '\t':
		return 255
	case l >= 'a' && l <= 'z':
		return letterRank[l-'a']
	case c >= '0' && c <= '9':
		return 90
	case c >= 0x80:
		return 30
	}
	switch c {
	case '(', ')', ',', '.', ';', '"', '=', '_', '/', ':', '{', '}', '*', '-', '\'':
		return 140
	}
	return 60
}

// letterRank is the relative frequency of letters (both cases together).
var letterRank = [26]int{
	'a' - 'a': 210, 'b' - 'a': 120, 'c' - 'a': 170, 'd' - 'a': 170, 'e' - 'a': 240, //nolint:gocritic,staticcheck // 'a' - 'a' keeps every entry in the letter's own form
	'f' - 'a': 140, 'g' - 'a': 130, 'h' - 'a': 150, 'i' - 'a': 210, 'j' - 'a': 50,
	'k' - 'a': 80, 'l' - 'a': 180, 'm' - 'a': 150, 'n' - 'a': 210, 'o' - 'a': 210,
	'p' - 'a': 140, 'q' - 'a': 40, 'r' - 'a': 210, 's' - 'a': 210, 't' - 'a': 230,
	'u' - 'a': 160, 'v' - 'a': 100, 'w' - 'a': 110, 'x' - 'a': 70, 'y' - 'a': 110,
	'z' - 'a': 40,
}
