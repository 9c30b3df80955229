package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	dockerclient "github.com/docker/docker/client"
	"golang.org/x/sys/unix"
)

// ErrScopeInUse is why a daemon does not start while another one on this
// host serves the same sessions.
var ErrScopeInUse = errors.New("another sandboxd serves this scope")

// A daemon adopts every live session of its scope (its runtime's labels on
// its engine) when it starts, and removes what it does not adopt; on
// shutdown it closes what it holds. Two daemons of one scope at once would
// close each other's sessions: a harness that starts two `sandboxd serve`
// with the default labels, or tests whose daemons shared labels (issue 23:
// a sandbox shut down in the middle of an upload). So a daemon holds a lock
// on its scope for as long as it runs: flock(2) on a file per scope in a
// folder of the user's, released by the kernel when the process ends, so a
// crash leaves nothing stale. It covers daemons of one user on one host; a
// daemon on another host sharing a remote engine is not seen (said in
// docs/running.md).

// scopeLock is a held lock; release gives it back (idempotent).
type scopeLock struct {
	f *os.File
}

func (l *scopeLock) release() {
	if l != nil && l.f != nil {
		_ = l.f.Close() // closing the descriptor drops the flock
		l.f = nil
	}
}

// scopeLockDir is the folder of the user's scope locks: under
// $XDG_RUNTIME_DIR when set, else the temp folder, private to the user.
func scopeLockDir() (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	name := "sandboxd"
	if base == "" {
		base, name = os.TempDir(), fmt.Sprintf("sandboxd-%d", os.Getuid())
	}
	dir := filepath.Join(base, name, "scopes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("scope lock folder: %w", err)
	}
	// A folder another user made (or a link they planted) in a shared temp
	// folder is not trusted with our lock.
	for _, d := range []string{filepath.Dir(dir), dir} {
		fi, err := os.Lstat(d)
		if err != nil {
			return "", fmt.Errorf("scope lock folder: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o022 != 0 {
			return "", fmt.Errorf("scope lock folder %s: not a folder of this user's that only it can write", d)
		}
	}
	return dir, nil
}

// scopeKey names the sessions a daemon of c serves: its backend, its
// engine and its labels. The same labels on another engine are another
// scope.
func scopeKey(c Config) (key, describe string) {
	engine := os.Getenv("DOCKER_HOST")
	if c.DockerClient != nil {
		engine = c.DockerClient.DaemonHost()
	}
	if engine == "" {
		engine = dockerclient.DefaultDockerHost
	}
	var labels []string
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		labels = append(labels, k+"="+c.Labels[k])
	}
	shown := strings.Join(labels, ",")
	if shown == "" {
		shown = "none"
	}
	h := sha256.Sum256([]byte(c.Backend + "\x00" + engine + "\x00" + strings.Join(labels, "\x00")))
	return hex.EncodeToString(h[:8]), fmt.Sprintf("labels %s on %s", shown, engine)
}

// lockScope takes the lock of c's scope, or says which daemon holds it.
// holder is written into the lock file for the next one's message.
func lockScope(c Config, holder string) (*scopeLock, error) {
	dir, err := scopeLockDir()
	if err != nil {
		return nil, err
	}
	key, describe := scopeKey(c)
	path := filepath.Join(dir, key+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("scope lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 512)
		n, _ := f.ReadAt(b, 0)
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			held := strings.TrimSpace(string(b[:n]))
			if held == "" {
				held = "a daemon starting"
			}
			return nil, fmt.Errorf("%w (%s), held by %s: a daemon adopts, and removes, every session of its scope, "+
				"so two at once would close each other's sessions; give this one its own --label KEY=VALUE, or stop the other first (lock %s)",
				ErrScopeInUse, describe, held, path)
		}
		return nil, fmt.Errorf("scope lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(holder), 0)
	}
	return &scopeLock{f: f}, nil
}
