package skills

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The built-in skills: each folder here with a SKILL.md is one (a test
// checks that every one is embedded and valid).
//
//go:embed run-tests repo-summary
var builtinFS embed.FS

// Builtin is the tree of the built-in skills, as a root: Path "run-tests"
// is the folder run-tests/.
func Builtin() fs.FS { return builtinFS }

// ExtractBuiltin writes the built-in skills under dir, into a folder named
// after the hash of their content, and returns that folder: files 0444,
// scripts (under scripts/ and deps/) 0555, folders 0555. A folder already
// there with the same content is used as it is; it is made in a temporary
// folder and renamed into place, so a crash or a concurrent extraction never
// leaves a partial tree under the final name. Bind-mount the skills from it.
func ExtractBuiltin(dir string) (string, error) { return extract(Builtin(), dir) }

// treeFile is one file of a tree to extract.
type treeFile struct {
	path string // slash path
	data []byte
	mode fs.FileMode
}

// fileMode is the mode of an extracted file: executable under scripts/ and
// deps/, read-only for everyone.
func fileMode(p string) fs.FileMode {
	for _, part := range strings.Split(path.Dir(p), "/") {
		if part == "scripts" || part == "deps" {
			return 0o555
		}
	}
	return 0o444
}

// readTree reads every regular file of fsys and the tree's content hash.
func readTree(fsys fs.FS) ([]treeFile, string, error) {
	var files []treeFile
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files = append(files, treeFile{path: p, data: data, mode: fileMode(p)})
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	h := sha256.New()
	for _, f := range files {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f.data)))
		fmt.Fprintf(h, "%s\x00%o\x00", f.path, f.mode)
		h.Write(n[:])
		h.Write(f.data)
	}
	return files, hex.EncodeToString(h.Sum(nil))[:16], nil
}

// extract writes the tree of fsys under dir/<hash> (see ExtractBuiltin).
func extract(fsys fs.FS, dir string) (string, error) {
	files, sum, err := readTree(fsys)
	if err != nil {
		return "", fmt.Errorf("reading the built-in skills: %w", err)
	}
	final := filepath.Join(dir, sum)
	if complete(final, files) {
		return final, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("extracting the built-in skills: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".tmp-"+sum+"-")
	if err != nil {
		return "", fmt.Errorf("extracting the built-in skills: %w", err)
	}
	defer func() { _ = removeTree(tmp) }() // gone after a successful rename
	if err := writeTree(tmp, files); err != nil {
		return "", fmt.Errorf("extracting the built-in skills: %w", err)
	}
	for attempt := 0; ; attempt++ {
		err := os.Rename(tmp, final)
		if err == nil {
			return final, nil
		}
		if complete(final, files) {
			return final, nil // another process extracted it meanwhile
		}
		if attempt > 0 {
			return "", fmt.Errorf("extracting the built-in skills: %w", err)
		}
		// A tree under the final name that differs (a crash cannot leave
		// one, a hand can): replace it.
		if err := removeTree(final); err != nil {
			return "", fmt.Errorf("extracting the built-in skills: replacing %s: %w", final, err)
		}
	}
}

// writeTree writes files under root (which exists), then makes every
// folder 0555, the root last.
func writeTree(root string, files []treeFile) error {
	dirs := map[string]bool{}
	for _, f := range files {
		name := filepath.Join(root, filepath.FromSlash(f.path))
		for d := path.Dir(f.path); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(name, f.data, 0o600); err != nil {
			return err
		}
		if err := os.Chmod(name, f.mode); err != nil {
			return err
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	// Deepest first, so a folder is still writable while its children
	// change.
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] > sorted[j] })
	for _, d := range sorted {
		if err := os.Chmod(filepath.Join(root, filepath.FromSlash(d)), 0o555); err != nil {
			return err
		}
	}
	return os.Chmod(root, 0o555)
}

// complete reports whether dir holds every file of files with its content
// and mode.
func complete(dir string, files []treeFile) bool {
	for _, f := range files {
		name := filepath.Join(dir, filepath.FromSlash(f.path))
		fi, err := os.Lstat(name)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(f.data)) || fi.Mode().Perm() != f.mode {
			return false
		}
		data, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(data, f.data) {
			return false
		}
	}
	return true
}

// removeTree removes an extracted tree, whose folders are read-only.
func removeTree(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
