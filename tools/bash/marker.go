package bash

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// How completion is detected: the shell's prompt (PS1) prints a marker
//
//	RS "sbx:" NONCE US seq US $? US $! US $PWD US $PATH US NONCE RS
//
// (RS = 0x1e, US = 0x1f) each time the shell is ready for a new command.
// NONCE is 16 random hex digits per shell: output cannot fake a marker
// without knowing it, and even `echo "$PS1"` does not parse because its
// fields are not numbers. seq is set by the line that starts each command,
// so a prompt of an earlier line (typed-ahead input run after a command
// ended) is not taken for the current command's end. $PWD and $PATH need no
// fork, which keeps a round trip well under a millisecond.
const (
	rs = "\x1e"
	us = "\x1f"
)

// maxMarkerLen bounds a marker (PATH and PWD included); a begin sequence with
// no end within it is ordinary output.
const maxMarkerLen = 64 << 10

type marker struct {
	seq   uint64
	exit  int
	bgPID int // -1 if none
	cwd   string
	path  string
}

type markerCodec struct {
	begin, end []byte
}

func newNonce() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

func newMarkerCodec(nonce string) markerCodec {
	return markerCodec{
		begin: []byte(rs + "sbx:" + nonce + us),
		end:   []byte(us + nonce + rs),
	}
}

// ps1 is the prompt of a POSIX sh: PS1 undergoes parameter expansion.
func (c markerCodec) ps1() string {
	return string(c.begin) + "${__sbx_seq:-}" + us + "$?" + us + "${!:-}" + us + "${PWD:-}" + us + "${PATH:-}" + string(c.end)
}

// bashPrompt defines the function bash runs as PROMPT_COMMAND with the exit
// status as $1. bash does not use PS1 for the marker: after an "unexpected
// EOF" syntax error in eval it prints a stale PS1 expansion (old $? and
// variables), while PROMPT_COMMAND runs afresh; and in POSIX mode a '!' in
// PS1 would become the history number. The format uses octal escapes, so
// the function's text holds no raw marker bytes.
//
// Job notices: bash reports finished and stopped background jobs ("[1]+
// Done  sleep 1") just before it prints PS1, which is after PROMPT_COMMAND,
// so they would follow the marker and open the next command's output. The
// function prints them itself before the marker: `jobs -n` lists the jobs
// whose state changed since bash last reported them, in the format of the
// notices, and marks them reported, so bash does not print them again. It
// would also list jobs just started, which bash announced already ("[1]
// 4242"): `jobs -nr` first marks the changed running jobs reported,
// silently. Only with job control on (`set -m`, the interactive default),
// as bash prints no notices without it.
func (c markerCodec) bashPrompt() string {
	esc := func(b []byte) string {
		return strings.NewReplacer(rs, `\036`, us, `\037`).Replace(string(b))
	}
	format := esc(c.begin) + `%s\037%s\037%s\037%s\037%s` + esc(c.end)
	// It writes to /dev/tty, so a command that redirected the shell's stdout
	// (`exec >log`) does not lose the prompt. PS1 and PS2 are emptied each
	// time: a script such as a virtualenv's activate may have set a prompt,
	// which would show up as output.
	args := `'` + format + `' "${__sbx_seq:-}" "$1" "${!:-}" "${PWD:-}" "${PATH:-}"`
	out := `{ case $- in *m*) jobs -nr >/dev/null; jobs -n;; esac; printf ` + args + `; }`
	// Last, xtrace goes off until the next command's own prefix turns it
	// on again (xtraceOff), so the line that runs it is not traced.
	return `__sbx_prompt() { ` + out + ` >/dev/tty || ` + out + `; PS1=''; PS2=''; case $- in *x*) set +x; __sbx_x=x;; esac; }`
}

// parse decodes a marker body (between begin and end).
func parseMarkerBody(body []byte) (marker, bool) {
	parts := strings.Split(string(body), us)
	if len(parts) < 5 {
		return marker{}, false
	}
	seq, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return marker{}, false
	}
	exit, err := strconv.Atoi(parts[1])
	if err != nil || exit < 0 {
		return marker{}, false
	}
	bg := -1
	if parts[2] != "" {
		if bg, err = strconv.Atoi(parts[2]); err != nil {
			return marker{}, false
		}
	}
	n := len(parts)
	return marker{
		seq:   seq,
		exit:  exit,
		bgPID: bg,
		cwd:   strings.Join(parts[3:n-1], us),
		path:  parts[n-1],
	}, true
}

// markerScanner splits raw pty output into output bytes and markers. It
// holds back a tail that may be the start of a marker until it can tell.
type markerScanner struct {
	codec markerCodec
	hold  []byte
}

// feed scans data and calls out for output bytes and mark for each marker,
// in order.
func (s *markerScanner) feed(data []byte, out func([]byte), mark func(marker)) {
	if len(s.hold) > 0 {
		s.hold = append(s.hold, data...)
		data, s.hold = s.hold, nil
	}
	for len(data) > 0 {
		i := bytes.Index(data, s.codec.begin)
		if i < 0 {
			keep := partialPrefix(data, s.codec.begin)
			if n := len(data) - keep; n > 0 {
				out(data[:n])
			}
			s.keep(data[len(data)-keep:])
			return
		}
		if i > 0 {
			out(data[:i])
			data = data[i:]
		}
		rest := data[len(s.codec.begin):]
		j := bytes.Index(rest, s.codec.end)
		if j < 0 {
			if len(data) <= maxMarkerLen {
				s.keep(data)
				return
			}
			out(data[:len(s.codec.begin)]) // too long: not a marker
			data = rest
			continue
		}
		m, ok := parseMarkerBody(rest[:j])
		if !ok {
			out(data[:len(s.codec.begin)]) // e.g. `echo "$PS1"`: not a marker
			data = rest
			continue
		}
		mark(m)
		data = rest[j+len(s.codec.end):]
	}
}

func (s *markerScanner) keep(b []byte) {
	if len(b) > 0 {
		s.hold = append(s.hold[:0:0], b...)
	}
}

// flush returns and forgets the held-back bytes (the shell ended).
func (s *markerScanner) flush() []byte {
	h := s.hold
	s.hold = nil
	return h
}

// partialPrefix is the length of the longest suffix of data that is a proper
// prefix of pat.
func partialPrefix(data, pat []byte) int {
	tail := data[len(data)-min(len(pat)-1, len(data)):]
	for off := 0; off < len(tail); off++ {
		i := bytes.IndexByte(tail[off:], pat[0])
		if i < 0 {
			return 0
		}
		off += i
		if bytes.HasPrefix(pat, tail[off:]) {
			return len(tail) - off
		}
	}
	return 0
}
