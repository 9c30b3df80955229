package grep

import (
	"bytes"
	"context"
	"errors"
	"syscall"
)

const (
	// binaryProbe is how much of a file is checked for a NUL byte, the
	// sign of a binary file (as git and ripgrep do).
	binaryProbe = 8 << 10
	// initialBuffer is each worker's read buffer; files that fit are read
	// with one call, bigger ones are searched a chunk of lines at a time.
	initialBuffer = 64 << 10
	// maxBuffer bounds a buffer grown to hold one very long line; past it
	// the line is searched in pieces.
	maxBuffer = 16 << 20
)

// errBinary marks a file skipped as binary.
var errBinary = errors.New("binary file")

// searcher searches files with one matcher; each walk worker has its own,
// so its buffer is reused from file to file without locks.
type searcher struct {
	ctx context.Context // checked between chunks of a big file
	sc  *scanner
	buf []byte
}

func newSearcher(ctx context.Context, m *matcher) *searcher {
	return &searcher{ctx: ctx, sc: m.newScanner(), buf: make([]byte, initialBuffer)}
}

// fileResult is what searching one file found.
type fileResult struct {
	matched bool
	lines   int   // matching lines (when counting)
	mtime   int64 // modification time, Unix ns (when matched)
}

// search reports whether the file at path has a matching line, or with
// countAll how many. Binary files give errBinary. The file is read with
// raw system calls into the reused buffer: one open, read and close for a
// small file, no allocation.
func (s *searcher) search(path string, countAll bool) (fileResult, error) {
	var res fileResult
	fd, err := openFile(path)
	if err != nil {
		return res, err
	}
	defer syscall.Close(fd)
	carry := 0 // bytes of an unfinished line kept from the previous chunk
	first := true
	for {
		n, err := readFull(fd, s.buf[carry:])
		if err != nil {
			return res, err
		}
		end := carry + n
		eof := end < len(s.buf)
		if first {
			first = false
			if bytes.IndexByte(s.buf[:min(end, binaryProbe)], 0) >= 0 {
				return res, errBinary
			}
		}
		chunk := s.buf[:end]
		if !eof {
			cut := bytes.LastIndexByte(chunk, '\n')
			if cut < 0 && len(s.buf) < maxBuffer {
				// One line fills the buffer: grow it and read on.
				bigger := make([]byte, 2*len(s.buf))
				copy(bigger, s.buf[:end])
				s.buf = bigger
				carry = end
				continue
			}
			if cut < 0 {
				cut = end - 1
			}
			chunk = s.buf[:cut+1]
		}
		s.sc.reset()
		for pos := 0; pos < len(chunk); {
			_, le, ok := s.sc.nextLine(chunk, pos)
			if !ok {
				break
			}
			res.matched = true
			res.lines++
			if !countAll {
				break
			}
			pos = le + 1
		}
		if res.matched && !countAll || eof {
			break
		}
		if err := s.ctx.Err(); err != nil {
			return res, err
		}
		carry = copy(s.buf, s.buf[len(chunk):end])
	}
	if res.matched {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err == nil {
			res.mtime = st.Mtim.Nano()
		}
	}
	return res, nil
}

func openFile(path string) (int, error) {
	for {
		// O_NONBLOCK: a file swapped for a FIFO after the walk saw it must
		// not block the search.
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
		if err == syscall.EINTR {
			continue
		}
		return fd, err
	}
}

// readFull reads until b is full or the end of the file.
func readFull(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		r, err := syscall.Read(fd, b[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if r == 0 {
			break
		}
		n += r
	}
	return n, nil
}
