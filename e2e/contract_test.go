package e2e

// The tool contract (package e2e/contract) on Docker: a real session in a
// real container: read-only root, uid 1000, no capabilities, the agent's
// state dir on a noexec tmpfs, /workspace a volume. The contract runs
// against the test image (busybox + bash-static) and the default image
// (Debian bash) when the engine has it.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/e2e/contract"
	"github.com/sandboxd/sandboxd/sandbox"
)

// contractDefaultImage is the image sessions get when none is asked for.
const contractDefaultImage = contract.DefaultImage

func TestContract(t *testing.T) {
	t.Parallel()
	for _, img := range []struct{ name, ref string }{
		{"test-image", testImage},
		{"default-image", contractDefaultImage},
	} {
		t.Run(img.name, func(t *testing.T) {
			if img.name == "default-image" {
				if img.ref == testImage {
					t.Skipf("%s is the test image already (SANDBOXD_TEST_IMAGE)", img.ref)
				}
				needImage(t, img.ref)
			}
			t.Parallel()
			start := time.Now()
			s := ctSession(t, img.ref)
			t.Logf("%s: session ready in %v", img.ref, time.Since(start).Round(time.Millisecond))
			contract.Run(t, s)
			t.Logf("%s: contract ran in %v", img.ref, time.Since(start).Round(time.Millisecond))
		})
	}
}

func ctSession(t *testing.T, image string) *sandbox.Session {
	t.Helper()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: image, Tools: contract.Tools()})
	require.NoError(t, err)
	return s
}

// ctBody is the command output of a terminal text (contract.Body).
func ctBody(text string) string { return contract.Body(text) }
