package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxd/sandboxd/sandbox"
)

// InjectTrust is the daemon's injection CA as the sessions with inject
// rules get it (decision 0051): a folder per image, holding the CA alone
// and a bundle of the image's trusted roots followed by the CA, mounted
// read-only at sandbox.InjectCADir, and InjectTrustEnv pointing the
// image's tools at them. The image's own trust store stays as it is (the
// root filesystem is read-only and the session user is not root).
type InjectTrust struct {
	// CertPEM is the CA's certificate.
	CertPEM []byte
	// Dir holds the folders per image and CA (made if missing).
	Dir string
}

// maxRootsBytes bounds the image's CA bundle read (Debian's is ~220 KB).
const maxRootsBytes = 8 << 20

// imageRoots are where images keep their trusted roots as one PEM file,
// the first found wins: Debian, Ubuntu, Alpine, Arch; Fedora, RHEL;
// openSUSE; RHEL's extracted bundle; Alpine's and BSD-style cert.pem. The
// list Go's crypto/x509 reads on Linux.
var imageRoots = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// trustMount is the CA folder's mount for a session with inject rules (and
// the folder on the host); nothing without rules. A runtime without a CA
// refuses such a session.
func (r *Runtime) trustMount(o sandbox.SessionOptions, imageID string) ([]mount.Mount, string, error) {
	if len(o.Inject) == 0 {
		return nil, "", nil
	}
	t := r.opts.InjectTrust
	if t == nil || len(t.CertPEM) == 0 || t.Dir == "" {
		return nil, "", &sandbox.OptionsError{Problems: []string{"inject: this server has no injection CA (only profiles of its config inject; serve --config)"}}
	}
	sum := sha256.Sum256(append([]byte(imageID+"\x00"), t.CertPEM...))
	dir := filepath.Join(t.Dir, hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("inject: the CA folder: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the umask may have taken the r bits
		return nil, "", fmt.Errorf("inject: the CA folder: %w", err)
	}
	return []mount.Mount{{
		Type: mount.TypeBind, Source: dir, Target: sandbox.InjectCADir, ReadOnly: true,
		BindOptions: &mount.BindOptions{NonRecursive: true},
	}}, dir, nil
}

// writeTrust fills an image's CA folder, once: the image's roots are read
// from the session's created container (not started; the first session of
// the image pays one copy from the engine).
func (r *Runtime) writeTrust(ctx context.Context, containerID, dir string) error {
	bundle := filepath.Join(dir, path.Base(sandbox.InjectBundleFile))
	if _, err := os.Stat(bundle); err == nil {
		return nil
	}
	roots, err := r.imageRoots(ctx, containerID)
	if err != nil {
		return err
	}
	ca := r.opts.InjectTrust.CertPEM
	if err := writePublic(filepath.Join(dir, path.Base(sandbox.InjectCAFile)), ca); err != nil {
		return err
	}
	var b bytes.Buffer
	b.Write(roots)
	if len(roots) > 0 && !bytes.HasSuffix(roots, []byte("\n")) {
		b.WriteByte('\n')
	}
	b.WriteString("# sandboxd egress injection CA (decision 0051)\n")
	b.Write(ca)
	return writePublic(bundle, b.Bytes())
}

// imageRoots reads the first of imageRoots the container's image has
// (links followed); none: nil, and the bundle is the CA alone.
func (r *Runtime) imageRoots(ctx context.Context, containerID string) ([]byte, error) {
	for _, p := range imageRoots {
		for range 8 { // links followed, at most this many
			cctx, cancel := r.call(ctx)
			rc, st, err := r.cli.CopyFromContainer(cctx, containerID, p)
			if isNotFound(err) {
				cancel()
				break
			}
			if err != nil {
				cancel()
				return nil, fmt.Errorf("inject: reading the image's trusted roots (%s): %w", p, err)
			}
			b, link, err := firstFile(rc)
			rc.Close()
			cancel()
			if err != nil {
				return nil, fmt.Errorf("inject: reading the image's trusted roots (%s): %w", p, err)
			}
			if link == "" && st.LinkTarget != "" && st.LinkTarget != p {
				link = st.LinkTarget
			}
			if link == "" {
				return b, nil
			}
			if !path.IsAbs(link) {
				link = path.Join(path.Dir(p), link)
			}
			p = link
		}
	}
	return nil, nil
}

// firstFile reads the archive's first entry: a regular file's content
// (bounded), or a symbolic link's target.
func firstFile(rc io.Reader) ([]byte, string, error) {
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		return nil, "", err
	}
	switch h.Typeflag {
	case tar.TypeSymlink:
		return nil, h.Linkname, nil
	case tar.TypeReg:
		if h.Size > maxRootsBytes {
			return nil, "", fmt.Errorf("%d bytes, above %d", h.Size, maxRootsBytes)
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxRootsBytes))
		return b, "", err
	}
	return nil, "", errors.New("not a file")
}

// writePublic writes a file others may read, through a rename.
func writePublic(p string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }() // gone after the rename
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("inject: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("inject: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	return nil
}

// withTrustEnv sets sandbox.InjectTrustEnv in a container's environment,
// replacing any the image's options set.
func withTrustEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := sandbox.InjectTrustEnv[k]; !ours {
			out = append(out, kv)
		}
	}
	for k, v := range sandbox.InjectTrustEnv {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
