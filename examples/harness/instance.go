package main

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
)

// The example's own instances and the recipe of their images, built in.
//
//go:embed Dockerfile testdata
var builtin embed.FS

// maxPatch bounds a patch file: instances come from disk, not from a
// sandbox, but a wrong -instances folder should fail clearly, not load
// gigabytes.
const maxPatch = 8 << 20

// instance is one SWE-bench-shaped task: an image whose /testbed holds the
// repository at the task's base commit, the model's patch (here a
// known-good fix), the test patch applied before the evaluation, and the
// tests that decide it. The field names follow SWE-bench's dataset.
type instance struct {
	ID               string   `json:"instance_id"`
	ProblemStatement string   `json:"problem_statement"`
	Image            string   `json:"image"`
	TestCommand      string   `json:"test_command"` // run in /testbed; output: `python -m unittest -v` style
	FailToPass       []string `json:"FAIL_TO_PASS"`
	PassToPass       []string `json:"PASS_TO_PASS"`
	// BaseImage, with image.diff in the instance's folder, is how Image is
	// built when missing (-build): BaseImage with image.diff committed in
	// /testbed (Dockerfile in this folder).
	BaseImage string `json:"base_image,omitempty"`

	patch, testPatch, imageDiff []byte
}

var instanceID = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// loadInstances reads every folder of root in fsys that holds an
// instance.json, sorted by name.
func loadInstances(fsys fs.FS, root string) ([]*instance, error) {
	entries, err := fs.ReadDir(fsys, root)
	if err != nil {
		return nil, fmt.Errorf("reading the instances: %w", err)
	}
	var out []*instance
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := path.Join(root, e.Name())
		if _, err := fs.Stat(fsys, path.Join(dir, "instance.json")); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		in, err := loadInstance(fsys, dir)
		if err != nil {
			return nil, fmt.Errorf("instance %s: %w", e.Name(), err)
		}
		out = append(out, in)
	}
	if len(out) == 0 {
		return nil, errors.New("no instances (each is a folder with instance.json, patch.diff and test_patch.diff)")
	}
	return out, nil
}

func loadInstance(fsys fs.FS, dir string) (*instance, error) {
	b, err := readBounded(fsys, path.Join(dir, "instance.json"))
	if err != nil {
		return nil, err
	}
	in := &instance{}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		return nil, fmt.Errorf("instance.json: %w", err)
	}
	if in.patch, err = readBounded(fsys, path.Join(dir, "patch.diff")); err != nil {
		return nil, err
	}
	if in.testPatch, err = readBounded(fsys, path.Join(dir, "test_patch.diff")); err != nil {
		return nil, err
	}
	if in.BaseImage != "" {
		if in.imageDiff, err = readBounded(fsys, path.Join(dir, "image.diff")); err != nil {
			return nil, fmt.Errorf("base_image is set, so the folder needs the image's diff: %w", err)
		}
	}
	return in, in.validate()
}

func (in *instance) validate() error {
	switch {
	case !instanceID.MatchString(in.ID):
		return fmt.Errorf("instance_id %q: want lower-case letters, digits, '.', '_' or '-', at most 64", in.ID)
	case in.Image == "":
		return errors.New("image is empty")
	case in.TestCommand == "":
		return errors.New("test_command is empty")
	case len(in.FailToPass) == 0:
		return errors.New("FAIL_TO_PASS is empty: an instance needs at least one test the patch fixes")
	case len(in.patch) == 0 || len(in.testPatch) == 0:
		return errors.New("patch.diff or test_patch.diff is empty")
	}
	for _, t := range slices.Concat(in.FailToPass, in.PassToPass) {
		if strings.TrimSpace(t) == "" || strings.ContainsAny(t, " \n") {
			return fmt.Errorf("test %q: want a dotted test id such as tests.test_x.TestX.test_y", t)
		}
	}
	return nil
}

func readBounded(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	b, err := io.ReadAll(io.LimitReader(f, maxPatch+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > maxPatch {
		return nil, fmt.Errorf("%s: over the %d-byte limit", name, maxPatch)
	}
	return b, nil
}

// instancesFrom is the built-in instances for dir "", else those in dir.
func instancesFrom(dir string) ([]*instance, error) {
	if dir == "" {
		return loadInstances(builtin, "testdata")
	}
	ins, err := loadInstances(os.DirFS(dir), ".")
	if err != nil {
		return nil, fmt.Errorf("-instances %s: %w", dir, err)
	}
	return ins, nil
}
