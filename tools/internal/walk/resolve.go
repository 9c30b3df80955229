package walk

import (
	"os"
	"path/filepath"
	"strings"
)

// Resolve makes a path the model gave absolute: "~" and "~/x" are the home
// directory, a relative path is taken relative to base (the workspace), and
// the result is cleaned. Symlinks are not resolved, so the paths the tools
// print start with what the model wrote.
func Resolve(base, p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = home + p[1:]
		}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	return filepath.Clean(p)
}
