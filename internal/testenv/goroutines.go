package testenv

import (
	"runtime"
	"strings"
)

// Goroutines is the stack of every goroutine of this process whose stack
// mentions one of the substrings (all of them if none is given), for a
// test whose in-process server did not stop in time: what it still waits
// on is the failure's cause.
func Goroutines(mentions ...string) string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var b strings.Builder
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if len(mentions) == 0 || containsAny(g, mentions) {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
