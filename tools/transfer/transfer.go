package transfer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// Filer moves tar streams into and out of one sandbox: the API core's
// session (its agent extracts and writes under its roots, decision 0004).
type Filer interface {
	// Upload extracts a tar stream under the directory destDir.
	Upload(ctx context.Context, destDir string, tar io.Reader) error
	// Download writes a tar of path (its top entry named after its base
	// name; a symlink as a link, never followed) to w.
	Download(ctx context.Context, path string, w io.Writer) error
}

// New returns the tool name (UploadName or DownloadName) bound to f, or
// false for another name. The tool validates its arguments against its
// schema (tools.Tool) before anything reaches f.
func New(name string, f Filer, l Limits) (*tools.Tool, bool) {
	l = l.withDefaults()
	var t *tools.Tool
	var err error
	switch name {
	case UploadName:
		t, err = tools.NewFunc(UploadDefinition(l), func(ctx context.Context, a UploadAction) (*tools.Observation, error) {
			return upload(ctx, f, l, a)
		}, nil)
	case DownloadName:
		t, err = tools.NewFunc(DownloadDefinition(l), func(ctx context.Context, a DownloadAction) (*tools.Observation, error) {
			return download(ctx, f, l, a)
		}, nil)
	default:
		return nil, false
	}
	if err != nil {
		panic(err) // the schemas are this package's own: a test catches it
	}
	return t, true
}

// CheckPath refuses a path the tools do not take: relative, not clean
// ("..", "." or doubled slashes: what a caller meant is not what the sandbox
// would resolve), with a NUL byte, too long, or the root itself. The
// sandbox's agent then confines it to the session's roots (and refuses a
// symlink out of them).
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("`path` is empty: give an absolute path under /workspace or an editable path")
	case len(p) > MaxPath:
		return fmt.Errorf("`path` is %d bytes long, over the %d the sandbox takes", len(p), MaxPath)
	case strings.ContainsRune(p, 0):
		return errors.New("`path` contains a NUL byte")
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("`path` %q is relative: give an absolute path, e.g. /workspace/%s", p, strings.TrimPrefix(p, "./"))
	}
	for _, el := range strings.Split(p[1:], "/") {
		if el == ".." {
			return fmt.Errorf("`path` %q contains \"..\": give the path without it", p)
		}
	}
	if c := path.Clean(p); c != strings.TrimSuffix(p, "/") || c == "/" {
		if c == "/" {
			return errors.New("`path` is the root directory: give a path under /workspace or an editable path")
		}
		return fmt.Errorf("`path` %q is not clean: did you mean %q?", p, c)
	}
	return nil
}

// ParseMode reads mode ("644", "0755"): permission bits only.
func ParseMode(s string) (int64, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || len(s) < 3 || len(s) > 4 || (len(s) == 4 && s[0] != '0') || m > 0o777 {
		return 0, fmt.Errorf("`mode` %q is not an octal permission such as \"0644\" or \"0755\" (setuid, setgid and sticky bits are not taken)", s)
	}
	return int64(m), nil
}

// decodeBase64 decodes s (standard alphabet, padded or not, line breaks
// and spaces ignored) if it decodes to at most limit bytes.
func decodeBase64(name, s string, limit int64) ([]byte, error) {
	if strings.ContainsAny(s, " \t\r\n") {
		s = strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
				return -1
			}
			return r
		}, s)
	}
	if n := int64(base64.RawStdEncoding.DecodedLen(len(strings.TrimRight(s, "=")))); n > limit {
		return nil, fmt.Errorf("`%s` holds %s, over the %s one call takes: split the upload (several files, or a tar in parts unpacked in the terminal)",
			name, human(n), human(limit))
	}
	enc := base64.StdEncoding
	if len(s)%4 != 0 {
		enc = base64.RawStdEncoding
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		var ce base64.CorruptInputError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("`%s` is not valid base64 (standard alphabet A-Z a-z 0-9 + /): bad input at byte %d", name, int64(ce))
		}
		return nil, fmt.Errorf("`%s` is not valid base64: %v", name, err)
	}
	return b, nil
}

func upload(ctx context.Context, f Filer, l Limits, a UploadAction) (*tools.Observation, error) {
	if err := CheckPath(a.Path); err != nil {
		return tools.Errorf("upload: %v", err), nil
	}
	switch {
	case a.ContentBase64 == nil && a.TarBase64 == nil:
		return tools.Errorf("upload: give `content_base64` (a file's bytes) or `tar_base64` (an archive to unpack under path)"), nil
	case a.ContentBase64 != nil && a.TarBase64 != nil:
		return tools.Errorf("upload: give `content_base64` or `tar_base64`, not both"), nil
	case a.TarBase64 != nil && a.Mode != nil:
		return tools.Errorf("upload: `mode` is for a file from `content_base64`; a tar's entries carry their own modes"), nil
	}
	p := strings.TrimSuffix(a.Path, "/")
	if a.TarBase64 != nil {
		data, err := decodeBase64("tar_base64", *a.TarBase64, l.MaxUpload)
		if err != nil {
			return tools.Errorf("upload: %v", err), nil
		}
		if err := checkTar(data); err != nil {
			return tools.Errorf("upload: `tar_base64`: %v", err), nil
		}
		if err := f.Upload(ctx, p, bytes.NewReader(data)); err != nil {
			return failed(ctx, "upload to "+p, err)
		}
		res := UploadResult{Path: p, Kind: "tar", Bytes: int64(len(data)), SHA256: sum(data)}
		return tools.TextResult(fmt.Sprintf("Unpacked a %d-byte archive under %s (sha256 %s).", res.Bytes, p, res.SHA256), res), nil
	}
	if strings.HasSuffix(a.Path, "/") {
		return tools.Errorf("upload: `path` %q ends in '/': with `content_base64` it names the file to write", a.Path), nil
	}
	mode := int64(DefaultMode)
	if a.Mode != nil {
		var err error
		if mode, err = ParseMode(*a.Mode); err != nil {
			return tools.Errorf("upload: %v", err), nil
		}
	}
	data, err := decodeBase64("content_base64", *a.ContentBase64, l.MaxUpload)
	if err != nil {
		return tools.Errorf("upload: %v", err), nil
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Base(p), Size: int64(len(data)), Mode: mode, ModTime: time.Now(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return tools.Errorf("upload: %v", err), nil
	}
	_, _ = tw.Write(data) // into a bytes.Buffer, of the announced size
	_ = tw.Close()
	if err := f.Upload(ctx, path.Dir(p), &tb); err != nil {
		return failed(ctx, "upload to "+p, err)
	}
	res := UploadResult{Path: p, Kind: "file", Bytes: int64(len(data)), SHA256: sum(data), Mode: fmt.Sprintf("%04o", mode)}
	return tools.TextResult(fmt.Sprintf("Wrote %d bytes to %s (mode %s, sha256 %s).", res.Bytes, p, res.Mode, res.SHA256), res), nil
}

// maxTarEntries bounds the entries of one uploaded archive, checked before
// it is sent.
const maxTarEntries = 100_000

// checkTar reads the archive's headers, so a malformed one fails with a
// clear message before the sandbox sees it (the agent checks every entry
// again, names and links included, as it extracts).
func checkTar(data []byte) error {
	tr := tar.NewReader(bytes.NewReader(data))
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if n == 0 {
				return errors.New("the archive has no entries")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a readable tar archive (after %d entries): %v", n, err)
		}
		if n >= maxTarEntries {
			return fmt.Errorf("more than %d entries: upload it in parts", maxTarEntries)
		}
		name := hdr.Name
		if strings.HasPrefix(name, "/") || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(name, "/../") || strings.HasSuffix(name, "/..") {
			return fmt.Errorf("entry %q leads outside the destination (absolute, or \"..\"); entries must be relative to path", name)
		}
	}
}

func download(ctx context.Context, f Filer, l Limits, a DownloadAction) (*tools.Observation, error) {
	if err := CheckPath(a.Path); err != nil {
		return tools.Errorf("download: %v", err), nil
	}
	p := strings.TrimSuffix(a.Path, "/")
	var offset int64
	if a.Offset != nil {
		offset = *a.Offset
	}
	if offset < 0 || (a.Length != nil && *a.Length < 0) {
		return tools.Errorf("download: `offset` and `length` are at least 0"), nil
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := f.Download(dctx, p, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	res, buf, msg, err := readRange(pr, p, offset, a.Length, l.MaxDownload)
	// Enough is read (or it failed): stop the rest of the stream.
	_ = pr.CloseWithError(errStop)
	cancel()
	derr := <-done
	switch {
	case msg != "":
		return tools.Errorf("download: %s", msg), nil
	case err != nil && derr != nil && !errors.Is(derr, errStop) && !errors.Is(derr, context.Canceled):
		return failed(ctx, "download "+p, derr)
	case err != nil:
		return failed(ctx, "download "+p, err)
	}
	res.SHA256, res.ContentBase64 = sum(buf), base64.StdEncoding.EncodeToString(buf)
	end := res.Offset + res.Length
	text := fmt.Sprintf("Read %d bytes of %s (bytes %d to %d of %d", res.Length, p, res.Offset, end, res.Size)
	if res.EOF {
		text += ", to the end"
	} else {
		text += fmt.Sprintf("; %d more from offset %d", res.Size-end, end)
	}
	text += "); sha256 " + res.SHA256 + ". The bytes are content_base64 in the structured result."
	return tools.TextResult(text, res), nil
}

// errStop ends a download stream whose wanted bytes have been read.
var errStop = errors.New("download: range read")

// readRange reads the tar stream of a download of p up to the bytes
// [offset, offset+length) of its one file. msg is a failure the caller
// made (not a file, a range outside it, too much at once); err is the
// stream's.
func readRange(r io.Reader, p string, offset int64, length *int64, limit int64) (res DownloadResult, buf []byte, msg string, err error) {
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("the sandbox sent an empty archive for %s", p)
		}
		return res, nil, "", err
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // TypeRegA: old writers
	case tar.TypeDir:
		return res, nil, fmt.Sprintf("%s is a directory: download its files one by one, or make an archive of it in the terminal (tar -cf /workspace/out.tar -C %s .) and download that", p, p), nil
	case tar.TypeSymlink:
		return res, nil, fmt.Sprintf("%s is a symbolic link (to %q), which download does not follow: download the file it points to, if it is under the workspace or an editable path", p, hdr.Linkname), nil
	default:
		return res, nil, fmt.Sprintf("%s is not a regular file", p), nil
	}
	size := hdr.Size
	if offset > size {
		return res, nil, fmt.Sprintf("`offset` %d is past the end of %s, which has %d bytes", offset, p, size), nil
	}
	n := size - offset
	if length != nil {
		n = min(n, *length)
	}
	if n > limit {
		what := "the file has"
		if length != nil {
			what = "the range asks for"
		}
		return res, nil, fmt.Sprintf("%s is %d bytes and %s %d from offset %d, over the %s one call returns: ask for ranges, `offset` %d `length` %d, then on",
			p, size, what, n, offset, human(limit), offset, limit), nil
	}
	if _, err := io.CopyN(io.Discard, tr, offset); err != nil {
		return res, nil, "", fmt.Errorf("reading %s: %w", p, err)
	}
	buf = make([]byte, n)
	if _, err := io.ReadFull(tr, buf); err != nil {
		return res, nil, "", fmt.Errorf("reading %s: %w", p, err)
	}
	return DownloadResult{Path: p, Size: size, Offset: offset, Length: n, EOF: offset+n == size}, buf, "", nil
}

// failed is a failure of the sandbox side as the model reads it; a
// cancelled call stays an error.
func failed(ctx context.Context, what string, err error) (*tools.Observation, error) {
	if ctx.Err() != nil {
		return nil, err
	}
	return tools.Errorf("%s failed: %v", what, err), nil
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
