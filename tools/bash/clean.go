package bash

import (
	"bytes"
	"unicode/utf8"
)

// cleaner turns raw terminal output into text for a model, incrementally
// (chunks may split escape sequences and UTF-8 characters anywhere):
//   - escape sequences (CSI, OSC, DCS/SOS/PM/APC strings, two-byte ESC
//     sequences) are removed, colours included;
//   - a line is rendered the way a terminal shows it: "\r" returns to the
//     start of the line and later characters overwrite (so "\r\n" is a plain
//     newline and a progress bar keeps only its last state), backspace moves
//     left;
//   - invalid UTF-8 becomes U+FFFD (one per bad byte); other control
//     characters (BEL, NUL, C1) are dropped; tabs are kept.
//
// It emits finished lines; the unfinished last line stays until a newline,
// flushLine or finish.
type cleaner struct {
	st     escState
	seqLen int
	pend   []byte // an incomplete UTF-8 sequence
	params []byte // of the CSI sequence being read
	line   []rune
	col    int
	out    []byte
}

type escState uint8

const (
	stText escState = iota
	stEsc
	stCSI
	stEscInter
	stString
	stStringEsc
)

const (
	maxCSILen    = 256
	maxStringLen = 64 << 10
	maxLineRunes = 16 << 10 // a longer unfinished line is emitted as it is
)

// write processes p and returns the newly finished text (valid only until
// the next call).
func (c *cleaner) write(p []byte) []byte {
	c.out = c.out[:0]
	for len(p) > 0 {
		if c.st == stText {
			i := bytes.IndexByte(p, 0x1b)
			if i < 0 {
				c.text(p)
				return c.out
			}
			c.text(p[:i])
			c.st, c.seqLen = stEsc, 0
			p = p[i+1:]
			continue
		}
		b := p[0]
		p = p[1:]
		if !c.escape(b) {
			c.text([]byte{b})
		}
	}
	return c.out
}

// escape advances the escape-sequence state with b. It returns false if b
// ended the sequence abnormally and must be treated as text.
func (c *cleaner) escape(b byte) bool {
	c.seqLen++
	switch c.st {
	case stEsc:
		switch {
		case b == '[':
			c.st, c.params = stCSI, c.params[:0]
		case b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_':
			c.st = stString
		case b == 0x1b:
			c.seqLen = 0
		case b >= 0x20 && b <= 0x2f:
			c.st = stEscInter
		case b >= 0x30 && b <= 0x7e:
			c.st = stText
		default:
			c.st = stText
			return false
		}
	case stCSI:
		switch {
		case b >= 0x40 && b <= 0x7e:
			c.st = stText
			c.csi(b)
		case b >= 0x20 && b <= 0x3f && c.seqLen < maxCSILen:
			c.params = append(c.params, b)
		case b == 0x1b:
			c.st, c.seqLen = stEsc, 0
		default:
			c.st = stText
			return false
		}
	case stEscInter:
		switch {
		case b >= 0x20 && b <= 0x2f && c.seqLen < maxCSILen:
		case b >= 0x30 && b <= 0x7e:
			c.st = stText
		default:
			c.st = stText
			return false
		}
	case stString:
		switch {
		case b == 0x07:
			c.st = stText
		case b == 0x1b:
			c.st = stStringEsc
		case c.seqLen > maxStringLen:
			c.st = stText
		}
	case stStringEsc:
		if b == '\\' {
			c.st = stText
			return true
		}
		// ESC cancels the string and starts a new sequence.
		c.st, c.seqLen = stEsc, 0
		return c.escape(b)
	}
	return true
}

// csi applies the few sequences that change what a line shows: erase in
// line (progress bars that shrink clear the rest with it) and horizontal
// cursor moves. The others (colours, cursor up, clear screen) only vanish.
func (c *cleaner) csi(final byte) {
	n, ok := 0, true
	for _, p := range c.params {
		if p < '0' || p > '9' || n > 10000 {
			ok = false
			break
		}
		n = n*10 + int(p-'0')
	}
	if !ok {
		return
	}
	switch final {
	case 'K':
		switch n {
		case 0: // cursor to end
			if c.col < len(c.line) {
				c.line = c.line[:c.col]
			}
		case 1: // start to cursor
			for i := 0; i < c.col && i < len(c.line); i++ {
				c.line[i] = ' '
			}
		case 2: // whole line
			c.line = c.line[:0]
		}
	case 'G': // column n (1-based)
		c.col = min(max(n, 1)-1, maxLineRunes-1)
	case 'C': // forward
		c.col = min(c.col+max(n, 1), maxLineRunes-1)
	case 'D': // back
		c.col = max(c.col-max(n, 1), 0)
	}
}

// text adds printable bytes (no ESC) to the current line. A character
// split between two writes is completed from the front of p first, byte
// by byte, so every byte is used once and in order.
func (c *cleaner) text(p []byte) {
	for len(c.pend) > 0 && len(p) > 0 {
		k := len(c.pend)
		var buf [utf8.UTFMax]byte
		n := copy(buf[:], c.pend)
		for n < len(buf) && n-k < len(p) && !utf8.FullRune(buf[:n]) {
			buf[n] = p[n-k]
			n++
		}
		if !utf8.FullRune(buf[:n]) { // p ended first: still incomplete
			c.pend = append(c.pend[:0], buf[:n]...)
			return
		}
		c.pend = c.pend[:0]
		r, size := utf8.DecodeRune(buf[:n])
		c.char(r)
		if size >= k {
			p = p[size-k:] // the bytes of p that completed the character
		} else {
			// An invalid lead byte: the other pending bytes come next,
			// before p (an incomplete tail of them is pending again).
			c.scan(buf[size:k])
		}
	}
	c.scan(p)
}

// scan adds p; an incomplete character at its end is held in pend.
func (c *cleaner) scan(p []byte) {
	for len(p) > 0 {
		b := p[0]
		if b < utf8.RuneSelf {
			c.ascii(b)
			p = p[1:]
			continue
		}
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size == 1 && !utf8.FullRune(p) {
			c.pend = append(c.pend[:0], p...)
			return
		}
		c.char(r)
		p = p[size:]
	}
}

// char adds a non-ASCII character; C1 controls are dropped.
func (c *cleaner) char(r rune) {
	if r >= 0x80 && r <= 0x9f {
		return
	}
	c.put(r)
}

func (c *cleaner) ascii(b byte) {
	switch {
	case b == '\n':
		c.endLine(true)
	case b == '\r':
		c.col = 0
	case b == '\b':
		if c.col > 0 {
			c.col--
		}
	case b == '\t' || b >= 0x20 && b != 0x7f:
		c.put(rune(b))
	}
}

func (c *cleaner) put(r rune) {
	for len(c.line) < c.col { // the cursor was moved past the end
		c.line = append(c.line, ' ')
	}
	if c.col < len(c.line) {
		c.line[c.col] = r
	} else {
		c.line = append(c.line, r)
	}
	c.col++
	if len(c.line) >= maxLineRunes {
		c.endLine(false)
	}
}

func (c *cleaner) endLine(newline bool) {
	for _, r := range c.line {
		c.out = utf8.AppendRune(c.out, r)
	}
	if newline {
		c.out = append(c.out, '\n')
	}
	c.line, c.col = c.line[:0], 0
}

// flushLine returns the unfinished line as text (the command is still
// running and the call returns what it has).
func (c *cleaner) flushLine() []byte {
	c.out = c.out[:0]
	c.endLine(false)
	return c.out
}

// finish returns everything held: the output of a command is complete.
func (c *cleaner) finish() []byte {
	c.out = c.out[:0]
	for range c.pend {
		c.put(utf8.RuneError)
	}
	c.pend = nil
	c.st = stText
	c.endLine(false)
	return c.out
}

// cleanString cleans a complete text in one go.
func cleanString(raw []byte) string {
	var c cleaner
	s := string(c.write(raw))
	return s + string(c.finish())
}
