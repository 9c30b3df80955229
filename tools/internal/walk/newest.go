package walk

import (
	"cmp"
	"slices"
)

// Found is a matching file and its modification time (Unix nanoseconds).
type Found struct {
	Path    string
	ModTime int64
}

// SortNewestFirst orders files by modification time, newest first; files
// with the same time are in path order so results are deterministic.
func SortNewestFirst(files []Found) {
	slices.SortFunc(files, func(a, b Found) int {
		if c := cmp.Compare(b.ModTime, a.ModTime); c != 0 {
			return c
		}
		return cmp.Compare(a.Path, b.Path)
	})
}
