// Package output caps what a tool call shows the model: the output of one
// call is kept whole up to a limit of characters; beyond it the middle is
// cut (head and tail shown, with OpenHands' truncation notice) and the full
// output is saved to a file under the tool's state directory, itself capped
// at MaxSavedBytes (first and last halves kept). The terminal and the skill
// tools share it, so both cap output the same way.
package output

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// The truncation notice is OpenHands' DEFAULT_TRUNCATE_NOTICE_WITH_PERSIST.
const truncateNotice = "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you. The complete output has been saved to %s - you can use other tools to view the full content (truncated part starts around line %d).</NOTE>"

// partialNotice replaces it when the disk could not hold the output: the
// size saved, the path, why, the line.
const partialNotice = "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you. The first %s of the output have been saved to %s%s - you can use other tools to view them (truncated part starts around line %d).</NOTE>"

// cutNotice replaces it when the output was larger than maxSavedBytes: the
// cap, the size of head and tail kept, the path, the line.
const cutNotice = "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you. The output is larger than %s, the most saved of one output: its first %s and last %s have been saved to %s - you can use other tools to view them (truncated part starts around line %d).</NOTE>"

// plainNotice is used when the full output could not be saved.
const plainNotice = "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you.</NOTE>"

// MaxSavedBytes caps the file of one output (see maxSavedBytes).
const MaxSavedBytes = maxSavedBytes

const (
	// maxSavedBytes caps the file of one call's output: a command printing
	// without end must not fill the disk, and one output must leave room
	// for others in the sandbox's state directory (a 64 MiB tmpfs). A
	// larger output keeps its first and last halves of it (see save).
	maxSavedBytes = 16 << 20
	// memCap is how much output is kept in memory before it spills to a file.
	memCapMin = 1 << 20
)

// Accum collects the output of one call with bounded memory: all of it up
// to memCap bytes, then the head and a sliding tail in memory and the rest
// written to a file in dir. It is not safe for concurrent use.
type Accum struct {
	limit  int // characters shown to the model
	dir    string
	prefix string // of the saved files' names; "" for a fixed file (NewFile)
	memCap int

	buf      []byte // everything, until spilled
	head     []byte // after spilling: the start (at least limit runes)
	tail     []byte // after spilling: the end (at least limit runes)
	file     *os.File
	path     string
	saveCap  int64 // maxSavedBytes; tests use less
	saved    int64 // bytes of output passed to the file
	total    int64 // bytes of output added
	full     bool  // nothing more is saved: the disk is full, or an error
	diskFull bool
	err      error

	// writeAt writes to the file; nil is (*os.File).WriteAt. Tests
	// simulate a small disk with it.
	writeAt func(f *os.File, p []byte, off int64) (int, error)
}

// New returns an Accum that shows at most limit characters and saves a
// longer output to a new file dir/<prefix><random>.txt (dir is created when
// needed). On a full disk the oldest files of the same prefix in dir are
// removed to make room.
func New(limit int, dir, prefix string) *Accum {
	return &Accum{limit: limit, dir: dir, prefix: prefix, memCap: max(memCapMin, 8*limit), saveCap: maxSavedBytes}
}

// NewFile returns an Accum that writes everything to the file at path
// (created or truncated, mode 0600) as it comes, up to saveCap bytes: a
// longer output keeps its first and last halves of saveCap with a line
// saying how much was cut between them. Finish must be called to put the
// file in order and close it; its text shows at most limit characters.
func NewFile(path string, saveCap int64, limit int) (*Accum, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return &Accum{limit: limit, dir: filepath.Dir(path), saveCap: saveCap, file: f, path: path}, nil
}

// Add appends output.
func (a *Accum) Add(p []byte) {
	if len(p) == 0 {
		return
	}
	a.total += int64(len(p))
	if a.file == nil && a.err == nil {
		a.buf = append(a.buf, p...)
		if len(a.buf) > a.memCap {
			a.spill()
		}
		return
	}
	if a.file != nil {
		a.save(p)
	}
	if room := 4*a.limit - len(a.head); room > 0 {
		a.head = append(a.head, p[:min(room, len(p))]...)
	}
	// The tail keeps the last 4*limit bytes (enough for limit runes).
	a.tail = append(a.tail, p...)
	if keep := 4 * a.limit; len(a.tail) > 2*keep {
		cut := len(a.tail) - keep
		for cut < len(a.tail) && !utf8.RuneStart(a.tail[cut]) {
			cut++
		}
		a.tail = append(a.tail[:0], a.tail[cut:]...)
	}
}

// Contains reports whether the output held in memory contains p: all of it
// until it spills to a file, then its head and tail. Tests wait on it.
func (a *Accum) Contains(p []byte) bool {
	return bytes.Contains(a.buf, p) || bytes.Contains(a.head, p) || bytes.Contains(a.tail, p)
}

// spill moves the in-memory output to a file and keeps head and tail.
func (a *Accum) spill() {
	if err := a.openFile(); err != nil {
		a.err = err
		// Without a file, keep head and tail only.
	} else {
		a.save(a.buf)
	}
	n := min(len(a.buf), 4*a.limit)
	a.head = append([]byte(nil), a.buf[:n]...)
	a.tail = append([]byte(nil), a.buf[len(a.buf)-n:]...)
	a.buf = nil
}

func (a *Accum) openFile() error {
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(a.dir, a.prefix+hex.EncodeToString(b[:])+".txt")
	// Read and write: finish reorders the kept tail of a cut output.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	for err != nil && errors.Is(err, syscall.ENOSPC) && a.dropOldest() {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return err
	}
	a.file, a.path = f, path
	return nil
}

// save writes output to the file. The first saveCap bytes go to it in
// order. Beyond that the file keeps the first half (headCap bytes) and uses
// the rest as a ring that holds the latest bytes; finish puts the ring in
// order and marks the cut, so a file of a huge output holds its beginning
// and its end.
func (a *Accum) save(p []byte) {
	if a.full {
		return
	}
	headCap, ringCap := a.caps()
	write := a.writeAt
	if write == nil {
		write = (*os.File).WriteAt
	}
	for len(p) > 0 {
		off, room := a.saved, a.saveCap-a.saved // in order
		if a.saved >= headCap {
			r := (a.saved - headCap) % ringCap
			off, room = headCap+r, ringCap-r
		}
		wrapped := a.saved >= a.saveCap
		n, err := write(a.file, p[:min(int64(len(p)), room)], off)
		a.saved += int64(n)
		p = p[n:]
		switch {
		case err == nil:
		case wrapped:
			// Overwriting the ring failed: the file no longer holds the
			// output's beginning and end.
			a.dropFile(err)
			return
		case errors.Is(err, syscall.ENOSPC) && a.dropOldest():
			// Room was made: write the rest.
		case errors.Is(err, syscall.ENOSPC) && a.saved > 0:
			// Nothing left to drop: keep the beginning.
			a.full, a.diskFull = true, true
			return
		default:
			a.dropFile(err)
			return
		}
	}
}

// caps splits saveCap into the head kept of a cut output and the ring that
// keeps its tail.
func (a *Accum) caps() (head, ring int64) {
	head = a.saveCap / 2
	return head, a.saveCap - head
}

// cut reports whether the output was larger than the file keeps.
func (a *Accum) cut() bool { return a.saved > a.saveCap }

// dropFile gives up the file: one that cannot hold the output is no use to
// the model.
func (a *Accum) dropFile(err error) {
	a.err = err
	a.full = true
	_ = a.file.Close()
	_ = os.Remove(a.path)
	a.file, a.path = nil, ""
}

// finishCut puts the ring of a cut output in order (its oldest byte is at
// the next write position) and writes a line saying how much was cut over
// its first bytes, which are then cut too.
func (a *Accum) finishCut() {
	headCap, ringCap := a.caps()
	oldest := (a.saved - headCap) % ringCap
	if err := rotateLeft(a.file, headCap, headCap+ringCap, oldest); err != nil {
		a.dropFile(err)
		return
	}
	// The number of bytes cut includes the note's own length.
	cut := a.saved - a.saveCap
	var note string
	for range 3 {
		note = fmt.Sprintf("\n\n[... %d bytes of output cut here: this file keeps the first %s and the last %s ...]\n\n",
			cut+int64(len(note)), sizeText(headCap), sizeText(ringCap))
	}
	if _, err := a.file.WriteAt([]byte(note), headCap); err != nil {
		a.dropFile(err)
	}
}

// rotateLeft rotates the bytes of f in [lo, hi) left by k, in place with
// little memory: three reversals.
func rotateLeft(f *os.File, lo, hi, k int64) error {
	if k == 0 {
		return nil
	}
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for _, r := range [][2]int64{{lo, lo + k}, {lo + k, hi}, {lo, hi}} {
		if err := reverseRange(f, r[0], r[1], a, b); err != nil {
			return err
		}
	}
	return nil
}

// reverseRange reverses the bytes of f in [lo, hi): it swaps reversed
// chunks from both ends, working inwards.
func reverseRange(f *os.File, lo, hi int64, a, b []byte) error {
	for hi-lo > 1 {
		n := min(int64(len(a)), (hi-lo)/2)
		x, y := a[:n], b[:n]
		if _, err := f.ReadAt(x, lo); err != nil {
			return err
		}
		if _, err := f.ReadAt(y, hi-n); err != nil {
			return err
		}
		slices.Reverse(x)
		slices.Reverse(y)
		if _, err := f.WriteAt(y, lo); err != nil {
			return err
		}
		if _, err := f.WriteAt(x, hi-n); err != nil {
			return err
		}
		lo, hi = lo+n, hi-n
	}
	return nil
}

// dropOldest removes the oldest full output saved in dir (not the one being
// written) to make room on a full disk: the sandbox's state directory is a
// small tmpfs, and the newest output matters most. It reports whether a
// file was removed.
func (a *Accum) dropOldest() bool {
	if a.prefix == "" {
		return false // a fixed file: the other files in dir are not ours
	}
	names, err := filepath.Glob(filepath.Join(a.dir, a.prefix+"*.txt"))
	if err != nil {
		return false
	}
	type saved struct {
		name string
		mod  int64
	}
	var old []saved
	for _, n := range names {
		if n == a.path {
			continue
		}
		if fi, err := os.Stat(n); err == nil {
			old = append(old, saved{n, fi.ModTime().UnixNano()})
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].mod < old[j].mod })
	for _, o := range old {
		if os.Remove(o.name) == nil {
			return true
		}
	}
	return false
}

// sizeText words a byte count for the partial notice.
func sizeText(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	if n >= 1<<20 {
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// Result is the text to show and, if it was cut, where the full output is.
type Result struct {
	Text      string
	Truncated bool
	// Path of the saved output; "" when it was not cut or could not be
	// saved.
	Path string
}

// Finish closes the file and returns the text, cut in the middle if longer
// than limit characters (head = ceil(avail/2), tail = the rest, where avail
// is limit minus the notice, as OpenHands' maybe_truncate does).
func (a *Accum) Finish() Result {
	defer a.close()
	if a.file == nil && a.err == nil {
		s := string(a.buf)
		if utf8.RuneCountInString(s) <= a.limit {
			return Result{Text: s}
		}
		if err := a.openFile(); err != nil {
			a.err = err
		} else {
			a.save(a.buf)
		}
		a.head, a.tail = a.buf, a.buf
	}
	if int64(len(a.head)) == a.total && utf8.RuneCount(a.head) <= a.limit {
		// A short output written straight to its file (NewFile).
		return Result{Text: string(a.head)}
	}
	if a.file != nil && a.cut() {
		a.finishCut()
	}
	head, tail := string(a.head), string(a.tail)
	path := ""
	if a.file != nil && a.err == nil {
		path = a.path
	}
	build := func(headRunes int) string {
		line := strings.Count(PrefixRunes(head, headRunes), "\n") + 1
		switch {
		case path == "":
			return plainNotice
		case a.cut():
			h, r := a.caps()
			return fmt.Sprintf(cutNotice, sizeText(a.saveCap), sizeText(h), sizeText(r), path, line)
		case a.full:
			why := ""
			if a.diskFull {
				why = " (the disk is full)"
			}
			return fmt.Sprintf(partialNotice, sizeText(a.saved), path, why, line)
		default:
			return fmt.Sprintf(truncateNotice, path, line)
		}
	}
	// The notice length depends on the line number only by a few digits:
	// size it once with a generous line number, then build it for real.
	avail := a.limit - utf8.RuneCountInString(build(0)) - 8
	avail = max(avail, 0)
	h := (avail + 1) / 2
	t := avail - h
	notice := build(h)
	return Result{
		Text:      PrefixRunes(head, h) + notice + suffixRunes(tail, t),
		Truncated: true,
		Path:      path,
	}
}

func (a *Accum) close() {
	if a.file != nil {
		_ = a.file.Close()
		a.file = nil
	}
}

// PrefixRunes returns the first n runes of s.
func PrefixRunes(s string, n int) string {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

func suffixRunes(s string, n int) string {
	i := len(s)
	for k := 0; k < n && i > 0; k++ {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
	}
	return s[i:]
}
