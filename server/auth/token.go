// Package auth holds sandboxd's API credentials and request checks: the
// operator token (from the environment or a generated 0600 file), bearer
// extraction from Authorization or the WebSocket subprotocol list, constant
// time comparison of digests, and the Host and Origin checks that keep
// browsers and DNS rebinding away from a loopback API.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// TokenBytes is the entropy of generated tokens (256 bits).
const TokenBytes = 32

// MinTokenLength is the shortest operator token accepted from the
// environment: 32 characters of base64 hold 192 bits at best. Shorter tokens
// are refused (fail closed) rather than silently weak.
const MinTokenLength = 32

// TokenFileName is the operator token's file in the state directory.
const TokenFileName = "token"

// NewToken returns a fresh random token, base64url without padding.
func NewToken() string {
	b := make([]byte, TokenBytes)
	if _, err := rand.Read(b); err != nil {
		panic("auth: crypto/rand failed: " + err.Error()) // never on Linux ≥ 3.17
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Digest is the SHA-256 of a token. Only digests are kept in memory and
// compared: ConstantTimeCompare returns early on a length mismatch
// (golang/go#47001), digests all have the same length.
type Digest [sha256.Size]byte

// DigestOf hashes a token.
func DigestOf(token string) Digest { return sha256.Sum256([]byte(token)) }

// Equal compares two digests in constant time.
func (d Digest) Equal(o Digest) bool { return subtle.ConstantTimeCompare(d[:], o[:]) == 1 }

// Matches reports whether token hashes to d, in constant time.
func (d Digest) Matches(token string) bool { return d.Equal(DigestOf(token)) }

// DefaultStateDir is $XDG_STATE_HOME/sandboxd, else ~/.local/state/sandboxd.
func DefaultStateDir() (string, error) {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "sandboxd"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no state directory: set --state-dir or XDG_STATE_HOME: %w", err)
	}
	return filepath.Join(home, ".local", "state", "sandboxd"), nil
}

// OperatorToken returns the operator token: fromEnv if set (it must be at
// least MinTokenLength characters), else the one in stateDir/token, created
// with a fresh random token (mode 0600, directory 0700) if missing. path is
// the file used, "" for the environment.
//
// The state directory must be this user's: an existing one that others may
// read or enter is tightened to 0700, one owned by another user is refused.
// The token file must be a regular file (not a symlink), this user's, and
// readable by nobody else; anything else is refused, never repaired, since
// someone else may have planted it.
func OperatorToken(fromEnv, stateDir string) (token, path string, created bool, err error) {
	if fromEnv != "" {
		if len(fromEnv) < MinTokenLength {
			return "", "", false, fmt.Errorf("SANDBOXD_TOKEN is %d characters; use at least %d random characters (or unset it to have one generated)", len(fromEnv), MinTokenLength)
		}
		return fromEnv, "", false, nil
	}
	if err := PrivateDir(stateDir); err != nil {
		return "", "", false, err
	}
	path = filepath.Join(stateDir, TokenFileName)
	token, err = readTokenFile(path, true)
	if err == nil {
		return token, path, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", "", false, err
	}
	token = NewToken()
	// O_EXCL: two servers starting at once must not overwrite each other's
	// token (and it never follows a symlink).
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		token, err = readTokenFile(path, true)
		return token, path, false, err
	}
	if err != nil {
		return "", "", false, fmt.Errorf("create token file: %w", err)
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		f.Close()
		return "", "", false, fmt.Errorf("write token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", "", false, fmt.Errorf("write token file: %w", err)
	}
	return token, path, true, nil
}

// PrivateDir makes sure dir exists as a directory of this user that nobody
// else can read or enter (0700): it is created so, tightened if it is
// looser, and refused if it belongs to someone else.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	switch {
	case !st.IsDir():
		return fmt.Errorf("state directory %s is not a directory", dir)
	case !ownedByMe(st):
		return fmt.Errorf("state directory %s belongs to another user; give a directory of your own", dir)
	case st.Mode().Perm() != 0o700:
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state directory %s has mode %v and cannot be made 0700: %w", dir, st.Mode().Perm(), err)
		}
	}
	return nil
}

// ReadTokenFile reads a token file, refusing one that others can read or
// that belongs to another user.
func ReadTokenFile(path string) (string, error) { return readTokenFile(path, false) }

// readTokenFile checks the file it has open (no window between the check and
// the read); with noFollow a symlink is refused too.
func readTokenFile(path string, noFollow bool) (string, error) {
	flags := os.O_RDONLY
	if noFollow {
		flags |= oNoFollow
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		if noFollow && errors.Is(err, syscall.ELOOP) {
			return "", fmt.Errorf("token file %s is a symlink; it must be a regular file", path)
		}
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	switch {
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("token file %s is not a regular file", path)
	case !ownedByMe(st) && noFollow: // the server's own file
		return "", fmt.Errorf("token file %s belongs to another user; delete it to have a new one generated", path)
	case !ownedByMe(st):
		return "", fmt.Errorf("token file %s belongs to another user; use a copy of your own (mode 0600)", path)
	case st.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("token file %s has mode %v: others can read it; chmod 600 it", path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if len(token) < MinTokenLength {
		return "", fmt.Errorf("token file %s holds %d characters; want at least %d (delete it to have a new one generated)", path, len(token), MinTokenLength)
	}
	return token, nil
}
