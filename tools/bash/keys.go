package bash

import "strings"

// namedKeys are the keys OpenHands accepts by name with is_input, as the
// bytes a terminal (xterm) sends for them.
var namedKeys = map[string]string{
	"UP":    "\x1b[A",
	"DOWN":  "\x1b[B",
	"RIGHT": "\x1b[C",
	"LEFT":  "\x1b[D",
	"HOME":  "\x1b[H",
	"END":   "\x1b[F",
	"PGUP":  "\x1b[5~",
	"PGDN":  "\x1b[6~",
	"TAB":   "\t",
	"ENTER": "\r",
	"ESC":   "\x1b",
	"BS":    "\x7f",
}

// key is a key the model asked to send.
type key struct {
	bytes string
	ctrl  byte // the letter of a C-<letter> key (upper case), else 0
}

// parseKey recognises a key name: C-<letter> (also CTRL-x, CTRL+x, any
// case) always, named keys (UP, TAB, ...) only as input, so a command such
// as `ENTER` is never mistaken outside is_input.
func parseKey(command string, isInput bool) (key, bool) {
	c := strings.TrimSpace(command)
	if letter, ok := ctrlLetter(c); ok {
		return key{bytes: string(rune(letter - 'A' + 1)), ctrl: letter}, true
	}
	if isInput {
		if b, ok := namedKeys[c]; ok {
			return key{bytes: b}, true
		}
	}
	return key{}, false
}

func ctrlLetter(c string) (byte, bool) {
	u := strings.ToUpper(c)
	var rest string
	switch {
	case strings.HasPrefix(u, "C-"):
		rest = u[2:]
	case strings.HasPrefix(u, "CTRL-"), strings.HasPrefix(u, "CTRL+"):
		rest = u[5:]
	default:
		return 0, false
	}
	if len(rest) != 1 || rest[0] < 'A' || rest[0] > 'Z' {
		return 0, false
	}
	return rest[0], true
}

// typedInput is text typed into the running process followed by Enter.
// Newlines become Enter too, the way a terminal sends them; one trailing
// newline is the Enter already added.
func typedInput(text string) string {
	text = strings.TrimSuffix(text, "\n")
	text = strings.TrimSuffix(text, "\r")
	text = strings.ReplaceAll(text, "\r\n", "\r")
	return strings.ReplaceAll(text, "\n", "\r") + "\r"
}
