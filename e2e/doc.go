// Package e2e holds sandboxd's end-to-end tests: real Docker engine, real
// sandboxd binary, real test image. `go test ./e2e/...` builds the static
// binary once (CGO_ENABLED=0 go build ./cmd/sandboxd) and the test image
// sandboxd-test:latest (images/build-test-image.sh) when it is missing.
// Every resource the suite creates carries a label with the run's id, so
// parallel runs do not collide, and the suite fails if any is left behind.
//
// Skipped with -short and when no Docker engine answers.
//
// Environment:
//
//	SANDBOXD_E2E_BINARY   use this static sandboxd binary instead of building one
//	SANDBOXD_TEST_IMAGE   test image (default sandboxd-test:latest)
//	SANDBOXD_TASK_IMAGE   benchmark task image of harness_test.go (default
//	                      sandboxd-task:latest, `make task-image`); its tests
//	                      skip without it unless SANDBOXD_E2E_REQUIRE_IMAGES
//	SANDBOXD_E2E_RUNTIME  OCI runtime of every session that names none (e.g.
//	                      runsc: the suite against gVisor, after `make runsc`;
//	                      docs/security.md §6 lists what differs there)
//
// e2e/api's tests of `sandboxd shell` in a terminal run it in a private tmux
// server (send-keys to type, capture-pane to read the screen); they skip,
// saying so, where tmux is not installed (`make deps` installs it).
//
// runsc_test.go runs gVisor's own checks and measures its cost against runc
// when the engine has the runtime runsc, and skips saying why otherwise.
package e2e
