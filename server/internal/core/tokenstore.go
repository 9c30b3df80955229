package core

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandboxd/sandboxd/server/auth"
)

// TokenStore keeps the SHA-256 digests of session tokens on disk (one 0600
// file per session under a 0700 directory), so that sessions kept over a
// daemon restart stay reachable with the token their client holds. Digests,
// not tokens: reading the store does not grant access.
type TokenStore struct {
	dir string
}

var sessionIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// NewTokenStore opens (creating) the store in dir, a directory of this user
// that nobody else may enter (tightened to 0700 if it was looser).
func NewTokenStore(dir string) (*TokenStore, error) {
	if err := auth.PrivateDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("session token store: %w", err)
	}
	if err := auth.PrivateDir(dir); err != nil {
		return nil, fmt.Errorf("session token store: %w", err)
	}
	return &TokenStore{dir: dir}, nil
}

func (ts *TokenStore) path(id string) (string, bool) {
	if !sessionIDRe.MatchString(id) {
		return "", false
	}
	return filepath.Join(ts.dir, id), true
}

// Save records the digest of a session's token.
func (ts *TokenStore) Save(id string, d auth.Digest) error {
	p, ok := ts.path(id)
	if !ok {
		return fmt.Errorf("session id %q is not a file name", id)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(hex.EncodeToString(d[:])+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Load returns the digest of a session's token, if recorded.
func (ts *TokenStore) Load(id string) (auth.Digest, bool) {
	var d auth.Digest
	p, ok := ts.path(id)
	if !ok {
		return d, false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return d, false
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != len(d) {
		return d, false
	}
	copy(d[:], raw)
	return d, true
}

// Delete forgets a session.
func (ts *TokenStore) Delete(id string) {
	if p, ok := ts.path(id); ok {
		_ = os.Remove(p)
	}
}

// Prune deletes the records of sessions for which live returns false.
func (ts *TokenStore) Prune(live func(id string) bool) {
	entries, err := os.ReadDir(ts.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !live(strings.TrimSuffix(e.Name(), ".tmp")) || strings.HasSuffix(e.Name(), ".tmp") {
			_ = os.Remove(filepath.Join(ts.dir, e.Name()))
		}
	}
}
