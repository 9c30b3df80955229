package transfer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
)

// fakeFiler records uploads and serves downloads as the agent would: a tar
// whose top entry is the path's base name.
type fakeFiler struct {
	uploads []fakeUpload
	entry   *tar.Header // what a download finds at the path
	data    []byte
	err     error // returned by both
	// sent counts the bytes a download wrote before it was stopped.
	sent int64
}

type fakeUpload struct {
	dir  string
	raw  []byte
	hdrs []*tar.Header
	data map[string][]byte
}

func (f *fakeFiler) Upload(_ context.Context, dir string, r io.Reader) error {
	if f.err != nil {
		return f.err
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	u := fakeUpload{dir: dir, raw: raw, data: map[string][]byte{}}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(tr)
		u.hdrs, u.data[h.Name] = append(u.hdrs, h), b
	}
	f.uploads = append(f.uploads, u)
	return nil
}

func (f *fakeFiler) Download(ctx context.Context, p string, w io.Writer) error {
	if f.err != nil {
		return f.err
	}
	cw := &countWriter{w: w, n: &f.sent}
	tw := tar.NewWriter(cw)
	h := *f.entry
	if err := tw.WriteHeader(&h); err != nil {
		return err
	}
	// In 4 KiB pieces, so a stopped reader stops the writer early.
	for b := f.data; len(b) > 0; {
		n := min(len(b), 4096)
		if _, err := tw.Write(b[:n]); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		b = b[n:]
	}
	return tw.Close()
}

type countWriter struct {
	w io.Writer
	n *int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	*c.n += int64(n)
	return n, err
}

func call(t *testing.T, f Filer, l Limits, name string, args any) *tools.Observation {
	t.Helper()
	tool, ok := New(name, f, l)
	require.True(t, ok)
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	obs, err := tool.Call(context.Background(), raw)
	require.NoError(t, err)
	return obs
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func hexSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func TestCheckPath(t *testing.T) {
	for p, want := range map[string]string{
		"/workspace/a.txt":                 "",
		"/testbed/src/x.py":                "",
		"/workspace/dir/":                  "",
		"":                                 "empty",
		"a.txt":                            "relative",
		"./a.txt":                          "relative",
		"/workspace/../etc":                `contains ".."`,
		"/workspace/a/..":                  `contains ".."`,
		"/..":                              `contains ".."`,
		"/":                                "root directory",
		"/workspace//a":                    "not clean",
		"/workspace/./a":                   "not clean",
		"/workspace/a\x00b":                "NUL",
		"/" + strings.Repeat("a", MaxPath): "bytes long",
	} {
		err := CheckPath(p)
		if want == "" {
			require.NoError(t, err, p)
			continue
		}
		require.Error(t, err, p)
		assert.Contains(t, err.Error(), want, p)
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]int64{"644": 0o644, "0755": 0o755, "0600": 0o600, "000": 0} {
		m, err := ParseMode(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, m, s)
	}
	for _, s := range []string{"4755", "1777", "9", "64", "07555", "rwx", "0x1ff", "-644"} {
		_, err := ParseMode(s)
		assert.Error(t, err, s)
	}
}

// Arguments the schema refuses never reach the sandbox, and say what is
// wrong by name.
func TestSchemaValidation(t *testing.T) {
	f := &fakeFiler{}
	for name, c := range map[string]struct {
		tool string
		args string
		want string
	}{
		"no path":       {UploadName, `{"content_base64":""}`, "missing required parameter"},
		"unknown":       {UploadName, `{"path":"/workspace/a","content_base64":"","contents":""}`, "unknown parameter"},
		"mode pattern":  {UploadName, `{"path":"/workspace/a","content_base64":"","mode":"rwxr-xr-x"}`, "mode"},
		"mode setuid":   {UploadName, `{"path":"/workspace/a","content_base64":"","mode":"4755"}`, "mode"},
		"path type":     {DownloadName, `{"path":7}`, "`path` must be a string"},
		"negative":      {DownloadName, `{"path":"/workspace/a","offset":-1}`, "`offset` must be at least 0"},
		"length type":   {DownloadName, `{"path":"/workspace/a","length":"all"}`, "`length`"},
		"not an object": {DownloadName, `["/workspace/a"]`, "expected a JSON object"},
		"path too long": {DownloadName, `{"path":"/` + strings.Repeat("a", MaxPath+1) + `"}`, "path"},
	} {
		t.Run(name, func(t *testing.T) {
			tool, _ := New(c.tool, f, Limits{})
			obs, err := tool.Call(context.Background(), json.RawMessage(c.args))
			require.NoError(t, err)
			assert.True(t, obs.IsError)
			assert.Contains(t, obs.Text(), c.want)
		})
	}
	assert.Empty(t, f.uploads)
}

// A file upload is a one-entry tar into the file's directory, byte-exact,
// with its mode; the result's digest is the content's.
func TestUploadFile(t *testing.T) {
	data := randomBytes(t, 300_000)
	f := &fakeFiler{}
	obs := call(t, f, Limits{}, UploadName, map[string]any{"path": "/workspace/bin/tool", "content_base64": b64(data), "mode": "0755"})
	require.False(t, obs.IsError, obs.Text())
	require.Len(t, f.uploads, 1)
	u := f.uploads[0]
	assert.Equal(t, "/workspace/bin", u.dir)
	require.Len(t, u.hdrs, 1)
	assert.Equal(t, "tool", u.hdrs[0].Name)
	assert.Equal(t, int64(0o755), u.hdrs[0].Mode)
	assert.Equal(t, data, u.data["tool"])
	res := obs.Structured.(UploadResult)
	assert.Equal(t, UploadResult{Path: "/workspace/bin/tool", Kind: "file", Bytes: 300_000, SHA256: hexSum(data), Mode: "0755"}, res)

	// Default mode, an empty file, base64 with line breaks and without padding.
	call(t, f, Limits{}, UploadName, map[string]any{"path": "/workspace/empty", "content_base64": ""})
	assert.Equal(t, int64(DefaultMode), f.uploads[1].hdrs[0].Mode)
	assert.Empty(t, f.uploads[1].data["empty"])
	wrapped := b64([]byte("hello, world\n"))
	wrapped = wrapped[:8] + "\n" + wrapped[8:]
	call(t, f, Limits{}, UploadName, map[string]any{"path": "/workspace/h", "content_base64": wrapped})
	assert.Equal(t, "hello, world\n", string(f.uploads[2].data["h"]))
	call(t, f, Limits{}, UploadName, map[string]any{"path": "/workspace/r", "content_base64": base64.RawStdEncoding.EncodeToString([]byte("ab"))})
	assert.Equal(t, "ab", string(f.uploads[3].data["r"]))
}

// A tar goes to the sandbox as it was given, under path.
func TestUploadTar(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "eval.sh", Mode: 0o755, Size: 3, Typeflag: tar.TypeReg}))
	_, _ = tw.Write([]byte("#!\n"))
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "tests/", Mode: 0o755, Typeflag: tar.TypeDir}))
	require.NoError(t, tw.Close())
	f := &fakeFiler{}
	obs := call(t, f, Limits{}, UploadName, map[string]any{"path": "/testbed", "tar_base64": b64(b.Bytes())})
	require.False(t, obs.IsError, obs.Text())
	assert.Equal(t, "/testbed", f.uploads[0].dir)
	assert.Equal(t, b.Bytes(), f.uploads[0].raw)
	assert.Equal(t, UploadResult{Path: "/testbed", Kind: "tar", Bytes: int64(b.Len()), SHA256: hexSum(b.Bytes())}, obs.Structured)
}

// Uploads a caller got wrong fail before anything reaches the sandbox,
// saying what to change.
func TestUploadRefused(t *testing.T) {
	evil := func(name string) string {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		return b64(b.Bytes())
	}
	emptyTar := func() string {
		var b bytes.Buffer
		_ = tar.NewWriter(&b).Close()
		return b64(b.Bytes())
	}()
	for name, c := range map[string]struct {
		args map[string]any
		want string
	}{
		"neither":          {map[string]any{"path": "/workspace/a"}, "give `content_base64`"},
		"both":             {map[string]any{"path": "/workspace/a", "content_base64": "", "tar_base64": ""}, "not both"},
		"mode with tar":    {map[string]any{"path": "/workspace", "tar_base64": evil("a"), "mode": "0644"}, "`mode` is for a file"},
		"relative":         {map[string]any{"path": "workspace/a", "content_base64": ""}, "relative"},
		"dotdot":           {map[string]any{"path": "/workspace/../etc/passwd", "content_base64": ""}, `".."`},
		"dir for a file":   {map[string]any{"path": "/workspace/a/", "content_base64": ""}, "ends in '/'"},
		"bad base64":       {map[string]any{"path": "/workspace/a", "content_base64": "not base64!"}, "not valid base64"},
		"too big":          {map[string]any{"path": "/workspace/a", "content_base64": b64(make([]byte, 5000))}, "over the 4.0 KiB one call takes"},
		"tar not a tar":    {map[string]any{"path": "/workspace", "tar_base64": b64([]byte(strings.Repeat("junk", 200)))}, "not a readable tar"},
		"tar empty":        {map[string]any{"path": "/workspace", "tar_base64": emptyTar}, "no entries"},
		"tar dotdot":       {map[string]any{"path": "/workspace", "tar_base64": evil("../../etc/cron.d/x")}, "leads outside"},
		"tar absolute":     {map[string]any{"path": "/workspace", "tar_base64": evil("/etc/passwd")}, "leads outside"},
		"tar inner dotdot": {map[string]any{"path": "/workspace", "tar_base64": evil("a/../../b")}, "leads outside"},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeFiler{}
			obs := call(t, f, Limits{MaxUpload: 4096}, UploadName, c.args)
			assert.True(t, obs.IsError)
			assert.Contains(t, obs.Text(), c.want)
			assert.Empty(t, f.uploads)
		})
	}
}

// The sandbox's refusal (a path outside its roots, a symlink out) is a
// result the caller reads.
func TestSandboxRefusal(t *testing.T) {
	f := &fakeFiler{err: errors.New("/etc/x is not under the workspace /workspace or /testbed")}
	obs := call(t, f, Limits{}, UploadName, map[string]any{"path": "/etc/x", "content_base64": ""})
	assert.True(t, obs.IsError)
	assert.Contains(t, obs.Text(), "upload to /etc/x failed: /etc/x is not under the workspace")
	obs = call(t, f, Limits{}, DownloadName, map[string]any{"path": "/etc/passwd"})
	assert.True(t, obs.IsError)
	assert.Contains(t, obs.Text(), "download /etc/passwd failed: /etc/x is not under")
}

func fileFiler(data []byte) *fakeFiler {
	return &fakeFiler{entry: &tar.Header{Name: "log", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}, data: data}
}

// A whole file and ranges come back byte-exact with the digest of what was
// returned; a range near the start does not read the whole file.
func TestDownload(t *testing.T) {
	data := randomBytes(t, 1<<20)
	f := fileFiler(data)
	obs := call(t, f, Limits{}, DownloadName, map[string]any{"path": "/workspace/log"})
	require.False(t, obs.IsError, obs.Text())
	res := obs.Structured.(DownloadResult)
	got, err := base64.StdEncoding.DecodeString(res.ContentBase64)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.Equal(t, hexSum(data), res.SHA256)
	assert.Equal(t, DownloadResult{Path: "/workspace/log", Size: 1 << 20, Offset: 0, Length: 1 << 20, EOF: true, SHA256: res.SHA256, ContentBase64: res.ContentBase64}, res)

	f = fileFiler(data)
	obs = call(t, f, Limits{}, DownloadName, map[string]any{"path": "/workspace/log", "offset": 1000, "length": 5000})
	require.False(t, obs.IsError, obs.Text())
	res = obs.Structured.(DownloadResult)
	got, _ = base64.StdEncoding.DecodeString(res.ContentBase64)
	assert.Equal(t, data[1000:6000], got)
	assert.Equal(t, hexSum(data[1000:6000]), res.SHA256)
	assert.False(t, res.EOF)
	assert.Contains(t, obs.Text(), "bytes 1000 to 6000 of 1048576")
	assert.Less(t, f.sent, int64(len(data)), "the stream stops once the range is read")

	// A length past the end is cut at the end; offset at the end is empty.
	obs = call(t, fileFiler(data), Limits{}, DownloadName, map[string]any{"path": "/workspace/log", "offset": len(data) - 10, "length": 100})
	res = obs.Structured.(DownloadResult)
	assert.Equal(t, int64(10), res.Length)
	assert.True(t, res.EOF)
	obs = call(t, fileFiler(data), Limits{}, DownloadName, map[string]any{"path": "/workspace/log", "offset": len(data)})
	require.False(t, obs.IsError, obs.Text())
	assert.Equal(t, int64(0), obs.Structured.(DownloadResult).Length)

	// An empty file.
	obs = call(t, fileFiler(nil), Limits{}, DownloadName, map[string]any{"path": "/workspace/log"})
	require.False(t, obs.IsError, obs.Text())
	assert.Equal(t, DownloadResult{Path: "/workspace/log", EOF: true, SHA256: hexSum(nil)}, obs.Structured)
}

func TestDownloadRefused(t *testing.T) {
	data := randomBytes(t, 5000)
	for name, c := range map[string]struct {
		f    *fakeFiler
		args map[string]any
		want string
	}{
		"past the end": {fileFiler(data), map[string]any{"path": "/workspace/log", "offset": 5001}, "past the end"},
		"over the limit": {fileFiler(data), map[string]any{"path": "/workspace/log"},
			"over the 1000 bytes one call returns: ask for ranges, `offset` 0 `length` 1000"},
		"range over the limit": {fileFiler(data), map[string]any{"path": "/workspace/log", "offset": 10, "length": 2000}, "the range asks for 2000"},
		"directory":            {&fakeFiler{entry: &tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o755}}, map[string]any{"path": "/workspace/src"}, "is a directory"},
		"symlink": {&fakeFiler{entry: &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}}, map[string]any{"path": "/workspace/l"},
			`symbolic link (to "/etc/shadow"), which download does not follow`},
		"relative": {fileFiler(data), map[string]any{"path": "log"}, "relative"},
		"dotdot":   {fileFiler(data), map[string]any{"path": "/workspace/../proc/self/environ"}, `".."`},
	} {
		t.Run(name, func(t *testing.T) {
			obs := call(t, c.f, Limits{MaxDownload: 1000}, DownloadName, c.args)
			assert.True(t, obs.IsError)
			assert.Contains(t, obs.Text(), c.want)
		})
	}
}

// The definitions state their limits, and a body bound lowers the upload's.
func TestDefinitions(t *testing.T) {
	defs := Definitions(LimitsForBody(4 << 20))
	require.Len(t, defs, 2)
	assert.Equal(t, UploadName, defs[0].Name)
	assert.Contains(t, defs[0].Description, "At most 3.0 MiB decoded per call")
	assert.Contains(t, defs[1].Description, "At most 8 MiB per call")
	assert.True(t, defs[1].Annotations.ReadOnlyHint)
	assert.True(t, defs[0].Annotations.DestructiveHint)
	assert.Equal(t, Limits{MaxUpload: DefaultMaxUpload, MaxDownload: DefaultMaxDownload}, LimitsForBody(0))
	assert.Equal(t, int64(DefaultMaxUpload), LimitsForBody(32<<20).MaxUpload)
	_, ok := New("terminal", &fakeFiler{}, Limits{})
	assert.False(t, ok)
	assert.True(t, IsName("upload") && IsName("download") && !IsName("glob"))
}
