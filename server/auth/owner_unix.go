//go:build unix

package auth

import (
	"os"
	"syscall"
)

// oNoFollow makes an open fail (ELOOP) on a symlink.
const oNoFollow = syscall.O_NOFOLLOW

// ownedByMe reports whether the file belongs to the effective user.
func ownedByMe(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}
