package fileeditor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/sandboxd/sandboxd/tools"
)

// Limits. The numbers are OpenHands' (max_history_per_file, MAX_FILE_SIZE_MB,
// MAX_RESPONSE_LEN_CHAR) except the history budget, which upstream does not
// have (it keeps history on disk).
const (
	DefaultMaxFileBytes     = 10 << 20
	DefaultMaxHistory       = 10
	DefaultMaxHistoryBytes  = 64 << 20
	DefaultMaxResponseChars = 16000
	minResponseChars        = 1000
)

// ErrClosed is returned by Call after Close.
var ErrClosed = errors.New("fileeditor: executor is closed")

// Options configure an Executor. The zero value is usable.
type Options struct {
	// Workspace is the session's working directory: a relative path in a
	// call is answered with the absolute path it would be under Workspace.
	Workspace string
	// Root, if set, confines every command to paths under it (symlinks
	// resolved). It guards against mistakes, not attacks: the sandbox is the
	// security boundary.
	Root string
	// MaxFileBytes is the largest file that can be viewed or edited, and the
	// largest result of an edit. Default DefaultMaxFileBytes.
	MaxFileBytes int64
	// MaxHistory is how many edits per file undo_edit can revert. Default
	// DefaultMaxHistory.
	MaxHistory int
	// MaxHistoryBytes bounds the memory of all undo snapshots together; the
	// oldest go first. Default DefaultMaxHistoryBytes.
	MaxHistoryBytes int64
	// MaxResponseChars bounds the text of a view or an edit snippet.
	// Default DefaultMaxResponseChars, at least 1000.
	MaxResponseChars int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Executor runs file_editor actions. It is safe for concurrent use: calls on
// different files run in parallel, calls on one file (after symlinks are
// resolved) run one at a time.
type Executor struct {
	opts   Options
	root   string // Root with symlinks resolved
	hist   *history
	locks  pathLocks
	log    *slog.Logger
	closed atomic.Bool

	rename func(oldpath, newpath string) error // os.Rename; tests inject failures
}

var _ tools.Executor[Action] = (*Executor)(nil)

// NewExecutor validates opts, fills in defaults and returns an executor.
func NewExecutor(opts Options) (*Executor, error) {
	if opts.Workspace != "" && !filepath.IsAbs(opts.Workspace) {
		return nil, fmt.Errorf("fileeditor: workspace %q is not an absolute path", opts.Workspace)
	}
	if opts.Root != "" && !filepath.IsAbs(opts.Root) {
		return nil, fmt.Errorf("fileeditor: root %q is not an absolute path", opts.Root)
	}
	if opts.MaxFileBytes < 0 || opts.MaxHistory < 0 || opts.MaxHistoryBytes < 0 || opts.MaxResponseChars < 0 {
		return nil, errors.New("fileeditor: limits must not be negative")
	}
	if opts.MaxResponseChars > 0 && opts.MaxResponseChars < minResponseChars {
		return nil, fmt.Errorf("fileeditor: MaxResponseChars must be at least %d", minResponseChars)
	}
	opts.MaxFileBytes = cmp.Or(opts.MaxFileBytes, DefaultMaxFileBytes)
	opts.MaxHistory = cmp.Or(opts.MaxHistory, DefaultMaxHistory)
	opts.MaxHistoryBytes = cmp.Or(opts.MaxHistoryBytes, DefaultMaxHistoryBytes)
	opts.MaxResponseChars = cmp.Or(opts.MaxResponseChars, DefaultMaxResponseChars)
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	e := &Executor{
		opts:   opts,
		hist:   newHistory(opts.MaxHistory, opts.MaxHistoryBytes),
		log:    opts.Logger.With("component", "fileeditor"),
		rename: os.Rename,
	}
	if opts.Workspace != "" {
		e.opts.Workspace = filepath.Clean(opts.Workspace)
	}
	if opts.Root != "" {
		e.root = resolvePath(filepath.Clean(opts.Root))
	}
	return e, nil
}

// Close drops the undo history. Later calls return ErrClosed.
func (e *Executor) Close() error {
	e.closed.Store(true)
	e.hist.clear()
	return nil
}

// Call runs one action. Problems the model should read come back as an
// Observation with IsError; a Go error means the call did not happen (the
// context ended, the executor is closed).
func (e *Executor) Call(ctx context.Context, a Action) (*tools.Observation, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &Output{Command: a.Command, Path: a.Path, PrevExist: true}
	if !slices.Contains(commands, a.Command) {
		return fail(out, "Unrecognized command %s. The allowed commands for the %s tool are: %s", a.Command, Name, strings.Join(commands, ", ")), nil
	}
	if !filepath.IsAbs(a.Path) {
		return fail(out, "%s", e.relativePathMessage(a)), nil
	}
	p := filepath.Clean(a.Path)
	out.Path = p
	resolved := resolvePath(p)
	if e.root != "" && !within(resolved, e.root) {
		return invalidPath(out, p, fmt.Sprintf("The path is outside %s, the only directory this tool may access.", e.opts.Root)), nil
	}
	unlock, err := e.locks.lock(ctx, resolved)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if a.Command == "create" {
		return e.create(out, p, resolved, a.FileText), nil
	}
	fi, err := os.Stat(resolved)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		out.PrevExist = false
		if a.Command == "undo_edit" && e.hist.has(resolved) { // deleted by a batch (apply_patch)
			return e.undo(out, p, resolved), nil
		}
		return invalidPath(out, p, fmt.Sprintf("The path %s does not exist. Please provide a valid path.", p)), nil
	case err != nil:
		return fail(out, "Ran into %v while trying to read %s", unwrapPathError(err), p), nil
	case !fi.IsDir() && len(a.Path) > 1 && strings.HasSuffix(a.Path, "/"):
		return invalidPath(out, p, fmt.Sprintf("The path %s ends with a slash, but %s is a file, not a directory.", a.Path, p)), nil
	case fi.IsDir() && a.Command != "view":
		return invalidPath(out, p, fmt.Sprintf("The path %s is a directory and only the `view` command can be used on directories.", p)), nil
	case !fi.IsDir() && !fi.Mode().IsRegular():
		return invalidPath(out, p, fmt.Sprintf("The path %s is not a regular file or directory (it is %s); this tool only works on regular files.", p, describeMode(fi.Mode()))), nil
	}
	switch a.Command {
	case "view":
		return e.view(out, p, resolved, fi, a.ViewRange), nil
	case "str_replace":
		return e.strReplace(out, p, resolved, a.OldStr, a.NewStr), nil
	case "insert":
		return e.insert(out, p, resolved, a.InsertLine, a.NewStr), nil
	default: // undo_edit
		return e.undo(out, p, resolved), nil
	}
}

// relativePathMessage is upstream's error plus the absolute path the model
// probably meant, resolved against the workspace (and ~ against $HOME).
func (e *Executor) relativePathMessage(a Action) string {
	msg := fmt.Sprintf("Invalid `path` parameter: %s. The path should be an absolute path, starting with `/`.", a.Path)
	var guess string
	switch {
	case a.Path == "":
	case a.Path == "~" || strings.HasPrefix(a.Path, "~/"):
		if home, err := os.UserHomeDir(); err == nil {
			guess = filepath.Join(home, a.Path[1:])
		}
	case e.opts.Workspace != "":
		guess = filepath.Join(e.opts.Workspace, a.Path)
	}
	if guess != "" {
		msg += fmt.Sprintf(" Maybe you meant %s?", guess)
	}
	return msg
}

// resolvePath resolves symlinks in p, or in its directory when p itself does
// not exist (create) or is a dangling link. Locks, history and writes use the
// result, so two names of one file share a lock and an atomic rename replaces
// the file a symlink points to, not the symlink.
func resolvePath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	dir, base := filepath.Split(p)
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return filepath.Join(r, base)
	}
	return p
}

func within(p, root string) bool {
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// unwrapPathError drops the "op path:" prefix of a PathError: the messages
// name the path themselves.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

func fail(out *Output, format string, args ...any) *tools.Observation {
	obs := tools.Errorf(format, args...)
	obs.Structured = out
	return obs
}

func invalidPath(out *Output, p, hint string) *tools.Observation {
	return fail(out, "Invalid `path` parameter: %s. %s", p, hint)
}

// missingParam is upstream's message with its recovery hints.
func missingParam(out *Output, command, param string) *tools.Observation {
	hints := map[string]string{
		"str_replace/old_str": "To replace text, first run `view` on the file and copy `old_str` EXACTLY from its output (without the line numbers), including all whitespace. To insert new content after a known line, use `insert` (requires `insert_line` and `new_str`); to create a new file, use `create` with `file_text`.",
		"create/file_text":    "`create` writes a NEW file and needs `file_text` with its full content (it may be an empty string). If the file already exists, use `str_replace` or `insert`.",
		"insert/insert_line":  "`insert` places text AFTER the given line number; provide `insert_line` (0 inserts before the first line) and `new_str`. Run `view` first to pick the right line number.",
		"insert/new_str":      "`insert` needs `new_str` (the text to insert after `insert_line`).",
	}
	msg := fmt.Sprintf("Parameter `%s` is required for command: %s.", param, command)
	if h := hints[command+"/"+param]; h != "" {
		msg += "\n\nHint: " + h
	}
	return fail(out, "%s", msg)
}

// readFile reads a regular file of at most MaxFileBytes. It opens with
// O_NONBLOCK and checks the open file, so a path swapped for a FIFO between
// the Stat and the open cannot hang the call.
func (e *Executor) readFile(out *Output, p, resolved string) ([]byte, *tools.Observation) {
	f, err := os.OpenFile(resolved, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fail(out, "Ran into %v while trying to read %s", unwrapPathError(err), p)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fail(out, "Ran into %v while trying to read %s", unwrapPathError(err), p)
	}
	if !fi.Mode().IsRegular() {
		return nil, invalidPath(out, p, fmt.Sprintf("The path %s is not a regular file (it is %s); this tool only works on regular files.", p, describeMode(fi.Mode())))
	}
	if fi.Size() > e.opts.MaxFileBytes {
		return nil, e.tooLarge(out, p, fi.Size())
	}
	data, err := readAllSized(f, fi.Size(), e.opts.MaxFileBytes)
	if err != nil {
		return nil, fail(out, "Ran into %v while trying to read %s", unwrapPathError(err), p)
	}
	if int64(len(data)) > e.opts.MaxFileBytes { // grew since the Stat
		return nil, e.tooLarge(out, p, int64(len(data)))
	}
	return data, nil
}

func (e *Executor) tooLarge(out *Output, p string, size int64) *tools.Observation {
	return fail(out, "File validation failed for %s: File is too large (%.1fMB). Maximum allowed size is %s.",
		p, float64(size)/(1<<20), formatMB(e.opts.MaxFileBytes))
}

// loadText reads and decodes a text file for viewing or editing; images and
// binary files are refused with a message saying why.
func (e *Executor) loadText(out *Output, p string, data []byte) (*document, *tools.Observation) {
	if mime := imageMIME(data); mime != "" {
		return nil, fail(out, "File validation failed for %s: File is a %s image. Images can be shown with the `view` command but cannot be edited by this tool.", p, imageName(mime))
	}
	enc, err := detectEncoding(data)
	var text string
	if err == nil {
		text, err = decode(data, enc)
	}
	if err != nil {
		msg := fmt.Sprintf("File validation failed for %s: File appears to be binary and this file type cannot be read or edited by this tool (%v).", p, err)
		if unsupportedImageExt[strings.ToLower(filepath.Ext(p))] {
			msg += " Only PNG, JPEG, GIF and WebP images can be viewed."
		}
		return nil, fail(out, "%s", msg)
	}
	doc := newDocument(text, enc)
	out.Kind = "file"
	out.Encoding = enc.String()
	out.LineEnding = doc.lineEnding()
	return doc, nil
}

var unsupportedImageExt = map[string]bool{".bmp": true, ".tif": true, ".tiff": true, ".ico": true, ".heic": true, ".avif": true}

// imageMIME recognises the image formats models accept by their magic bytes
// (the extension is not trusted either way).
func imageMIME(b []byte) string {
	switch {
	case len(b) >= 8 && string(b[:8]) == "\x89PNG\r\n\x1a\n":
		return "image/png"
	case len(b) >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF:
		return "image/jpeg"
	case len(b) >= 6 && (string(b[:6]) == "GIF87a" || string(b[:6]) == "GIF89a"):
		return "image/gif"
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

func imageName(mime string) string {
	return map[string]string{"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}[mime]
}

// setContents fills old/new content in the output when they are small.
func setContents(out *Output, oldText, newText string, hasOld bool) {
	if len(oldText) > MaxStructuredContent || len(newText) > MaxStructuredContent {
		out.Omitted = true
		return
	}
	if hasOld {
		out.OldContent = &oldText
	}
	out.NewContent = &newText
}

// readAllSized reads f, whose size was size when checked, into one buffer of
// that size (io.ReadAll would grow and copy its buffer a dozen times for a
// 40 KB file), reading on if the file grew, up to limit+1 bytes.
func readAllSized(f *os.File, size, limit int64) ([]byte, error) {
	buf := make([]byte, size, size+1)
	n, err := io.ReadFull(f, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) { // shrank since the Stat
		return buf[:n], nil
	}
	if err != nil {
		return nil, err
	}
	rest, err := io.ReadAll(io.LimitReader(f, limit+1-size))
	return append(buf, rest...), err
}
