package grep

import (
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// maxFirstBytes is the largest set of possible first bytes worth scanning
// for (each is an IndexByte pass); with more, or with common bytes, the
// DFA over the whole text is as fast.
const maxFirstBytes = 3

// maxFirstByteRank is the most common byte (see byteRank) worth scanning for.
const maxFirstByteRank = 150

// byteSet is a set of bytes that every match starts with. When a pattern
// has no literal to look for ("\bq\w+", "[0-9]{4}-[0-9]{2}"), scanning for
// these bytes and running the regexp only on the lines they occur in
// avoids running Go's regexp (which has no DFA) over whole files.
type byteSet struct {
	in   [256]bool
	list []byte // the members, when few enough for IndexByte
}

// firstByteSet returns the set of bytes a non-empty match of re can start
// with, or nil if any byte can, the pattern can match the empty string, or
// the set is too large to help.
func firstByteSet(re *syntax.Regexp) *byteSet {
	s := &byteSet{}
	empty, ok := s.addFirst(re)
	if empty || !ok {
		return nil
	}
	for c := range 256 {
		if s.in[c] {
			s.list = append(s.list, byte(c))
		}
	}
	if len(s.list) == 0 || len(s.list) > maxFirstBytes {
		return nil
	}
	for _, c := range s.list {
		if byteRank(c) > maxFirstByteRank {
			return nil
		}
	}
	return s
}

// addFirst adds the possible first bytes of re; empty reports that re can
// match without consuming input (so what follows it can come first), and
// ok false means any byte can start a match.
func (s *byteSet) addFirst(re *syntax.Regexp) (empty, ok bool) {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true, true
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return true, true
		}
		s.addRune(re.Rune[0], re.Flags&syntax.FoldCase != 0)
		return false, true
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if hi >= utf8.RuneSelf {
				for c := 0xC2; c <= 0xF4; c++ { // any UTF-8 lead byte
					s.in[c] = true
				}
				hi = utf8.RuneSelf - 1
			}
			for c := lo; c <= hi; c++ {
				s.in[c] = true
			}
		}
		return false, true
	case syntax.OpCapture, syntax.OpPlus:
		return s.addFirst(re.Sub[0])
	case syntax.OpStar, syntax.OpQuest:
		_, ok := s.addFirst(re.Sub[0])
		return true, ok
	case syntax.OpRepeat:
		e, ok := s.addFirst(re.Sub[0])
		return e || re.Min == 0, ok
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			e, ok := s.addFirst(sub)
			if !ok || !e {
				return false, ok
			}
		}
		return true, true
	case syntax.OpAlternate:
		empty := false
		for _, sub := range re.Sub {
			e, ok := s.addFirst(sub)
			if !ok {
				return false, false
			}
			empty = empty || e
		}
		return empty, true
	}
	return false, false // any character
}

func (s *byteSet) addRune(r rune, fold bool) {
	var buf [utf8.UTFMax]byte
	add := func(r rune) {
		utf8.EncodeRune(buf[:], r)
		s.in[buf[0]] = true
	}
	add(r)
	if fold {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			add(f)
		}
	}
}

// index returns the offset of the first member byte at or after from in
// hay, or -1. next caches, per member, the position of its next
// occurrence (-1: unknown), so each byte is searched for once per text.
func (s *byteSet) index(hay []byte, from int, next []int) int {
	best := len(hay)
	for i, c := range s.list {
		if next[i] < from {
			next[i] = indexFrom(hay, c, from)
		}
		best = min(best, next[i])
	}
	if best >= len(hay) {
		return -1
	}
	return best
}
