package proto

import (
	"encoding/json"
	"fmt"
	"strings"
)

// EnvEntrypoint is the variable in which a runtime gives the agent the
// image's ENTRYPOINT + CMD for a session with `entrypoint: image`: an
// Entrypoint as JSON, in the container's environment (the container's own
// entrypoint is the agent). Its name starts with SANDBOXD_IMAGE_, the
// prefix of the runtime's facts of the image, none of which reaches the
// session's programs.
const EnvEntrypoint = "SANDBOXD_IMAGE_ENTRYPOINT"

// MaxEntrypointBytes bounds EnvEntrypoint's value.
const MaxEntrypointBytes = 64 << 10

// Entrypoint is the program the image starts: its ENTRYPOINT followed by
// its CMD, as Docker runs them, and its WORKDIR.
type Entrypoint struct {
	// Argv is ENTRYPOINT + CMD; empty when the image names neither.
	Argv []string `json:"argv"`
	// Dir is the image's WORKDIR; empty: "/".
	Dir string `json:"dir,omitempty"`
}

// Encode is e as EnvEntrypoint's value.
func (e Entrypoint) Encode() string {
	if e.Argv == nil {
		e.Argv = []string{}
	}
	b, _ := json.Marshal(e) // strings only: cannot fail
	return string(b)
}

// ParseEntrypoint decodes EnvEntrypoint's value: bounded, every argument
// free of NUL bytes, the folder absolute.
func ParseEntrypoint(s string) (Entrypoint, error) {
	var e Entrypoint
	if len(s) > MaxEntrypointBytes {
		return e, fmt.Errorf("%s: %d bytes, above the limit of %d", EnvEntrypoint, len(s), MaxEntrypointBytes)
	}
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		return Entrypoint{}, fmt.Errorf("%s: %w", EnvEntrypoint, err)
	}
	for _, a := range e.Argv {
		if strings.ContainsRune(a, 0) {
			return Entrypoint{}, fmt.Errorf("%s: an argument contains a NUL byte", EnvEntrypoint)
		}
	}
	if e.Dir != "" && (!strings.HasPrefix(e.Dir, "/") || strings.ContainsRune(e.Dir, 0)) {
		return Entrypoint{}, fmt.Errorf("%s: the folder %q is not an absolute path", EnvEntrypoint, e.Dir)
	}
	return e, nil
}
