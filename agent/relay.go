package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// ErrNoEndMark: the relay's input ended without its end mark (the command
// that feeds it was killed before it could say how it ended).
var ErrNoEndMark = errors.New("the output ended without its end mark")

// relayBuf is how much the relay reads at once: writes this large make a
// terminal cheap per byte (one line at a time through the tty layer is
// what makes `seq` on a terminal 9x slower than into a pipe).
const relayBuf = 256 << 10

// maxStatusDigits bounds the status after the end mark.
const maxStatusDigits = 10

// Relay copies r to w until r carries the end mark: "\n" + end + ":" +
// status + "\n", which is not written; it returns the status. It is how
// `sandboxd run` gives a command's output a pipe, as `docker run` does,
// rather than the session's terminal (decision 0038): the command writes
// into a pipe in blocks, and the relay writes them to the terminal in
// large writes. Reading stops at the mark, so a background job the
// command left holding the pipe cannot keep the relay (and the call)
// waiting. Output that merely resembles the mark (another status, no
// newline yet) is output. Without the mark r's end is ErrNoEndMark, after
// everything read has been written.
func Relay(r io.Reader, w io.Writer, end string) (int, error) {
	if end == "" || bytes.ContainsAny([]byte(end), "\n:") {
		return 0, fmt.Errorf("relay: the end mark %q must be non-empty, without newlines or colons", end)
	}
	mark := []byte("\n" + end + ":")
	// Held back: a tail that may be the start of the mark, or the mark and
	// a status still waiting for its newline.
	hold := len(mark) + maxStatusDigits + 1
	buf := make([]byte, 0, relayBuf+hold)
	for {
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		for {
			i := bytes.Index(buf, mark)
			if i < 0 {
				break
			}
			rest := buf[i+len(mark):]
			nl := bytes.IndexByte(rest, '\n')
			if nl < 0 && len(rest) <= maxStatusDigits && rerr == nil {
				break // the status may still be coming
			}
			if nl > 0 {
				if status, err := strconv.Atoi(string(rest[:nl])); err == nil && status >= 0 && nl <= maxStatusDigits {
					if _, err := w.Write(buf[:i]); err != nil {
						return 0, err
					}
					return status, nil
				}
			}
			// Not the mark after all: output up to and including its "\n".
			if _, err := w.Write(buf[:i+1]); err != nil {
				return 0, err
			}
			buf = buf[:copy(buf, buf[i+1:])]
		}
		keep := 0
		if rerr == nil {
			keep = min(len(buf), hold)
			// Only a tail that could begin the mark must wait.
			if j := bytes.LastIndexByte(buf[len(buf)-keep:], '\n'); j >= 0 {
				keep -= j
			} else {
				keep = 0
			}
		}
		if flush := len(buf) - keep; flush > 0 {
			if _, err := w.Write(buf[:flush]); err != nil {
				return 0, err
			}
			buf = buf[:copy(buf, buf[flush:])]
		}
		if rerr == io.EOF {
			return 0, ErrNoEndMark
		}
		if rerr != nil {
			return 0, rerr
		}
	}
}
