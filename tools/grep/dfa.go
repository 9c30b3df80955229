package grep

import (
	"regexp/syntax"
	"slices"
	"unicode/utf8"
)

// Go's regexp has no DFA: over a whole file its backtracker or NFA costs
// tens of nanoseconds per byte, several times ripgrep. A grep only needs to
// know which lines match, so a lazily built DFA over the same compiled
// program answers that at a table lookup per byte. States are built on
// demand from the program and cached per searcher (no locks); a pattern
// whose DFA keeps outgrowing the cache falls back to regexp.

const (
	// maxDFAStates bounds one cache (2 KiB a state); when full it is
	// cleared.
	maxDFAStates = 1000
	// maxDFAResets is how many clears a searcher tolerates before it gives
	// up on the DFA for good.
	maxDFAResets = 8
)

// Context of the previous byte, which decides ^ and \b before the next one.
const (
	prevLineStart uint8 = iota // start of a line: like the start of a text
	prevWord
	prevOther
)

// dstate is a DFA state: the program's threads before the assertions that
// depend on the next character are resolved, and the previous character's
// context.
type dstate struct {
	kind uint8 // stateNormal, or one of the sentinels below
	prev uint8
	pcs  []uint32
	// next holds the transition on each byte: a state, unknownState (not
	// built yet), matchState, or, for bytes >= 0x80, runeState (decode the
	// rune; those transitions are in other).
	next  [256]*dstate
	other map[rune]*dstate
}

const (
	stateNormal uint8 = iota
	stateUnknown
	stateMatch
	stateRune
)

// Sentinel transitions.
var (
	unknownState = &dstate{kind: stateUnknown}
	matchState   = &dstate{kind: stateMatch} // a match ended before this byte
	runeState    = &dstate{kind: stateRune}
)

// maxOtherRunes bounds a state's cache of non-ASCII transitions.
const maxOtherRunes = 64

func newDState(pcs []uint32, prev uint8) *dstate {
	s := &dstate{pcs: pcs, prev: prev}
	s.clearNext()
	return s
}

func (s *dstate) clearNext() {
	for c := range s.next {
		if c < utf8.RuneSelf {
			s.next[c] = unknownState
		} else {
			s.next[c] = runeState
		}
	}
	s.other = nil
}

// dfa is one searcher's DFA for a program.
type dfa struct {
	prog   *syntax.Prog
	states map[string]*dstate
	start  *dstate // a line start with no thread yet
	resets int
	failed bool // too many states: use regexp

	// Scratch space, reused to build states.
	set1, set2 sparseSet
	stack      []uint32
	pcs        []uint32
	key        []byte
}

func newDFA(prog *syntax.Prog) *dfa {
	d := &dfa{prog: prog, states: make(map[string]*dstate)}
	d.set1 = newSparseSet(len(prog.Inst))
	d.set2 = newSparseSet(len(prog.Inst))
	d.start = d.newStart()
	return d
}

func (d *dfa) newStart() *dstate {
	set := newSparseSet(len(d.prog.Inst))
	saved := d.stack
	d.stack = nil
	d.addClosure(&set, uint32(d.prog.Start))
	d.stack = saved
	return d.intern(&set, prevLineStart)
}

// firstMatch returns a position at or after from (a line start) before
// which a match has ended: the match is on the line that contains that
// position (a newline there ends that line). ok is false when no line
// matches, or when the DFA has failed (d.failed), in which case the caller
// uses regexp.
func (d *dfa) firstMatch(text []byte, from int) (at int, ok bool) {
	s := d.start
	i := from
	for i < len(text) {
		c := text[i]
		nx := s.next[c]
		if nx.kind == stateNormal {
			s = nx
			i++
			continue
		}
		size := 1
		switch nx.kind {
		case stateMatch:
			return i, true
		case stateUnknown:
			nx = d.step(s, rune(c))
			s.next[c] = nx
		case stateRune:
			var r rune
			r, size = utf8.DecodeRune(text[i:])
			if nx = s.other[r]; nx == nil {
				nx = d.step(s, r)
				if s.other == nil {
					s.other = make(map[rune]*dstate)
				}
				if len(s.other) < maxOtherRunes {
					s.other[r] = nx
				}
			}
		}
		if d.failed {
			return 0, false
		}
		if nx == matchState {
			return i, true
		}
		s = nx
		i += size
	}
	// The end of the text ends its last line, unless that ended with a
	// newline: there is no empty line after it.
	if len(text) > from && text[len(text)-1] != '\n' && d.resolve(s, -1, &d.set1) {
		return len(text) - 1, true
	}
	return 0, false
}

// matchLine reports whether the pattern matches line (which has no
// newline; an empty line is a line too).
func (d *dfa) matchLine(line []byte) bool {
	if len(line) == 0 {
		return d.resolve(d.start, -1, &d.set1)
	}
	_, ok := d.firstMatch(line, 0)
	return ok
}

// step computes the transition of s on r: matchState if a match ends
// before r, else the next state. A newline ends the line: every thread is
// dropped and the next state is the start state.
func (d *dfa) step(s *dstate, r rune) *dstate {
	next := r
	if r == '\n' {
		next = -1 // the end of a line is the end of a text
	}
	if d.resolve(s, next, &d.set1) {
		return matchState
	}
	if r == '\n' {
		return d.start
	}
	d.set2.clear()
	for _, pc := range d.set1.dense {
		in := &d.prog.Inst[pc]
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			if in.MatchRune(r) {
				d.addClosure(&d.set2, in.Out)
			}
		}
	}
	d.addClosure(&d.set2, uint32(d.prog.Start)) // unanchored: a match may start anywhere
	prev := prevOther
	if syntax.IsWordChar(r) {
		prev = prevWord
	}
	return d.intern(&d.set2, prev)
}

// resolve follows the assertions of s's threads that hold between its
// previous character and next (-1: the end of the line) into out, and
// reports whether a match is reached.
func (d *dfa) resolve(s *dstate, next rune, out *sparseSet) bool {
	prev := rune(-1) // the start of a line is the start of a text
	switch s.prev {
	case prevWord:
		prev = 'a'
	case prevOther:
		prev = ' '
	}
	flags := syntax.EmptyOpContext(prev, next)
	out.clear()
	d.stack = d.stack[:0]
	for i := len(s.pcs) - 1; i >= 0; i-- {
		d.stack = append(d.stack, s.pcs[i])
	}
	for len(d.stack) > 0 {
		pc := d.stack[len(d.stack)-1]
		d.stack = d.stack[:len(d.stack)-1]
		if out.has(pc) {
			continue
		}
		out.add(pc)
		in := &d.prog.Inst[pc]
		switch in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstEmptyWidth:
			if syntax.EmptyOp(in.Arg)&^flags == 0 {
				d.stack = append(d.stack, in.Out)
			}
		case syntax.InstAlt, syntax.InstAltMatch:
			d.stack = append(d.stack, in.Arg, in.Out)
		case syntax.InstCapture, syntax.InstNop:
			d.stack = append(d.stack, in.Out)
		}
	}
	return false
}

// addClosure adds pc and what it reaches without consuming input or
// testing an assertion.
func (d *dfa) addClosure(set *sparseSet, pc uint32) {
	d.stack = append(d.stack[:0], pc)
	for len(d.stack) > 0 {
		pc := d.stack[len(d.stack)-1]
		d.stack = d.stack[:len(d.stack)-1]
		if set.has(pc) {
			continue
		}
		set.add(pc)
		in := &d.prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			d.stack = append(d.stack, in.Arg, in.Out)
		case syntax.InstCapture, syntax.InstNop:
			d.stack = append(d.stack, in.Out)
		}
	}
}

// intern returns the state for the threads of set that matter (runes,
// matches, assertions) and prev, from the cache or new. A full cache is
// cleared first; after too many clears the DFA is marked failed.
func (d *dfa) intern(set *sparseSet, prev uint8) *dstate {
	d.pcs = d.pcs[:0]
	for _, pc := range set.dense {
		switch d.prog.Inst[pc].Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL,
			syntax.InstMatch, syntax.InstEmptyWidth:
			d.pcs = append(d.pcs, pc)
		}
	}
	slices.Sort(d.pcs)
	d.key = append(d.key[:0], prev)
	for _, pc := range d.pcs {
		d.key = append(d.key, byte(pc), byte(pc>>8), byte(pc>>16), byte(pc>>24))
	}
	if s, ok := d.states[string(d.key)]; ok {
		return s
	}
	if len(d.states) >= maxDFAStates {
		d.flush()
	}
	s := newDState(slices.Clone(d.pcs), prev)
	d.states[string(d.key)] = s
	return s
}

// flush empties the cache. Links between old states are cut so they can
// be collected; the state a scan holds stays valid.
func (d *dfa) flush() {
	d.resets++
	if d.resets > maxDFAResets {
		d.failed = true
	}
	for _, s := range d.states {
		s.clearNext()
	}
	d.states = make(map[string]*dstate)
	key, pcs := slices.Clone(d.key), slices.Clone(d.pcs)
	d.start = d.newStart()
	d.key, d.pcs = key, pcs
}

// sparseSet is a set of instruction numbers with O(1) add, test and clear
// that remembers insertion order.
type sparseSet struct {
	sparse []uint32
	dense  []uint32
}

func newSparseSet(n int) sparseSet {
	return sparseSet{sparse: make([]uint32, n), dense: make([]uint32, 0, n)}
}

func (s *sparseSet) has(pc uint32) bool {
	i := s.sparse[pc]
	return int(i) < len(s.dense) && s.dense[i] == pc
}

func (s *sparseSet) add(pc uint32) {
	s.sparse[pc] = uint32(len(s.dense))
	s.dense = append(s.dense, pc)
}

func (s *sparseSet) clear() { s.dense = s.dense[:0] }
