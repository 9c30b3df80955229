package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/sandbox"
)

func init() {
	register(&command{
		name:    "agent-image",
		summary: "write the agent as a FROM-scratch OCI image (tarball for docker load, or an OCI layout), no registry needed",
		run:     runAgentImage,
	})
}

const agentImageHelp = `
Writes this sandboxd binary (or --binary) as a one-layer image with nothing
else in it: the file /sandboxd, mode 0555, owned by root, entrypoint
["/sandboxd"], user 65534. The Kubernetes runtime mounts that image in each
Pod (an image volume at /.sandboxd, so the agent is /.sandboxd/sandboxd as
on Docker, or an init container copying it there); a cluster can only pull
it from a registry, so push it to one your cluster reads:

  sandboxd agent-image --oci-layout agent-oci
  skopeo copy oci:agent-oci:latest docker://REGISTRY/sandboxd-agent:TAG

  sandboxd agent-image --tar agent.tar
  docker load -i agent.tar     # or: crane push agent.tar REGISTRY/sandboxd-agent:TAG
  docker tag sandboxd-agent:latest REGISTRY/sandboxd-agent:TAG
  docker push REGISTRY/sandboxd-agent:TAG

--oci-layout writes an OCI image layout directory (skopeo's oci: and crane
push read it); the directory must be absent or empty. --tar writes the
tarball Docker 25's "docker save" writes, an OCI image layout plus docker's
manifest.json: docker load of any version, crane push, and skopeo's
oci-archive: and docker-archive: read it; "--tar -" writes it to stdout.

The same binary and tag give the same image digest every time. The digest
printed is the OCI manifest's, which pushing the layout keeps; docker push
and crane push of the tarball write a Docker manifest of another digest
(the same layer and config). The binary must be a static Linux executable
(make build; CGO off): the image has no libc.`

// agentImageBinary is where the binary sits in the image: its root, so an
// image volume mounted at sandbox.AgentDir shows it at sandbox.AgentPath.
const agentImageBinary = "/sandboxd"

// agentImageDefaultTag names the image when --tag is not given.
const agentImageDefaultTag = "sandboxd-agent:latest"

// agentImageUser runs the binary when the image itself is run (an init
// container): nobody, never root.
const agentImageUser = "65534:65534"

func runAgentImage(_ context.Context, std stdio, args []string) error {
	fs := newFlagSet("agent-image", std, "(--tar FILE | --oci-layout DIR) [--tag REF] [--binary PATH]", agentImageHelp)
	tarPath := fs.String("tar", "", "write the tarball to `FILE` (- for stdout)")
	layoutDir := fs.String("oci-layout", "", "write an OCI image layout into `DIR` (absent or empty)")
	tag := fs.String("tag", agentImageDefaultTag, "the image's name, `REF` (name:tag)")
	binary := fs.String("binary", "", "the static sandboxd binary to put in the image, `PATH` (default: this one)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *tarPath == "" && *layoutDir == "" {
		return usageErrorf("give --tar FILE, --oci-layout DIR, or both")
	}
	ref, err := parseImageTag(*tag)
	if err != nil {
		return usageErrorf("--tag: %v", err)
	}
	if *layoutDir != "" {
		if err := checkEmptyDir(*layoutDir); err != nil {
			return usageErrorf("--oci-layout: %v", err)
		}
	}
	path := *binary
	if path == "" {
		if path, err = os.Executable(); err != nil {
			return fmt.Errorf("finding this binary: %w (give --binary PATH)", err)
		}
	}
	img, err := buildAgentImage(path, versionLine())
	if err != nil {
		return err
	}
	// What was written goes to stdout, or stderr when stdout is the tarball.
	msg := std.out
	if *tarPath != "" {
		if *tarPath == "-" {
			msg = std.err
			err = img.writeTar(std.out, ref)
		} else {
			err = writeFileAtomic(*tarPath, func(w io.Writer) error { return img.writeTar(w, ref) })
		}
		if err != nil {
			return fmt.Errorf("writing the tarball: %w", err)
		}
		say(msg, "wrote %s (%s, linux/%s) to %s\n", reference.FamiliarString(ref), img.digest, img.arch, *tarPath)
	}
	if *layoutDir != "" {
		if err := img.writeLayout(*layoutDir, ref); err != nil {
			return fmt.Errorf("writing the OCI layout: %w", err)
		}
		say(msg, "wrote %s (%s, linux/%s) as an OCI layout in %s\n", reference.FamiliarString(ref), img.digest, img.arch, *layoutDir)
	}
	return nil
}

// parseImageTag parses an image name with a tag, as docker does
// ("sandboxd-agent:v1", "registry.example:5000/team/agent:v1"); a name
// without a tag or with a digest is refused: the tarball and layout name
// the image by its tag.
func parseImageTag(s string) (reference.NamedTagged, error) {
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %v (want name:tag, e.g. %s)", s, err, agentImageDefaultTag)
	}
	tagged, ok := named.(reference.NamedTagged)
	if !ok {
		return nil, fmt.Errorf("%q has no tag (want name:tag, e.g. %s)", s, agentImageDefaultTag)
	}
	if _, digested := named.(reference.Digested); digested {
		return nil, fmt.Errorf("%q names a digest: give name:tag only", s)
	}
	return tagged, nil
}

// agentImage is the image in memory: its three blobs (the gzipped layer,
// the config, the manifest) and the manifest's digest, the image's name.
type agentImage struct {
	arch     string
	layer    ocispec.Descriptor
	config   ocispec.Descriptor
	manifest ocispec.Descriptor
	digest   digest.Digest // of the manifest
	blobs    map[digest.Digest][]byte
}

// epoch is every time the image records, so the same binary and version
// give the same digests.
var epoch = time.Unix(0, 0).UTC()

// buildAgentImage builds the image of the binary at path: one layer
// holding agentImageBinary, for the architecture its ELF header names;
// version goes into the config's labels.
func buildAgentImage(path, version string) (*agentImage, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the binary: %w", err)
	}
	arch, err := staticLinuxArch(path, bin)
	if err != nil {
		return nil, err
	}
	var raw, gz bytes.Buffer
	tw := tar.NewWriter(&raw)
	if err := tw.WriteHeader(&tar.Header{
		Name: agentImageBinary[1:], Mode: 0o555, Size: int64(len(bin)), Typeflag: tar.TypeReg,
		ModTime: epoch, Format: tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	zw := gzip.NewWriter(&gz) // no name, no time in the header: reproducible
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	img := &agentImage{arch: arch, blobs: map[digest.Digest][]byte{}}
	img.layer = img.add(ocispec.MediaTypeImageLayerGzip, gz.Bytes())
	created := epoch
	cfg, err := json.Marshal(ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{OS: "linux", Architecture: arch},
		Config: ocispec.ImageConfig{
			User:       agentImageUser,
			Entrypoint: []string{agentImageBinary},
			Cmd:        []string{"version"},
			WorkingDir: "/",
			Labels: map[string]string{
				ocispec.AnnotationTitle:       "sandboxd agent",
				ocispec.AnnotationDescription: "the sandboxd binary, which runs in each sandbox as " + sandbox.AgentPath,
				ocispec.AnnotationVersion:     version,
			},
		},
		RootFS:  ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromBytes(raw.Bytes())}},
		History: []ocispec.History{{Created: &created, CreatedBy: "sandboxd agent-image"}},
	})
	if err != nil {
		return nil, err
	}
	img.config = img.add(ocispec.MediaTypeImageConfig, cfg)
	man, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    img.config,
		Layers:    []ocispec.Descriptor{img.layer},
	})
	if err != nil {
		return nil, err
	}
	img.manifest = img.add(ocispec.MediaTypeImageManifest, man)
	img.manifest.Platform = &ocispec.Platform{OS: "linux", Architecture: arch}
	img.digest = img.manifest.Digest
	return img, nil
}

// add stores a blob and returns its descriptor.
func (img *agentImage) add(mediaType string, b []byte) ocispec.Descriptor {
	d := digest.FromBytes(b)
	img.blobs[d] = b
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

// files are the image's files in an OCI image layout, in a fixed order:
// oci-layout, the blobs, then index.json (naming the image the way skopeo,
// org.opencontainers.image.ref.name = the tag, and containerd,
// io.containerd.image.name = the whole name, look it up). withDocker adds
// docker save's manifest.json, pointing into the same blobs: the tarball
// Docker 25 and later write, which docker load of every version reads.
func (img *agentImage) files(ref reference.NamedTagged, withDocker bool) ([]imageFile, error) {
	layoutJSON, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return nil, err
	}
	desc := img.manifest
	desc.Annotations = map[string]string{
		ocispec.AnnotationRefName:  ref.Tag(),
		"io.containerd.image.name": ref.String(),
	}
	index, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{desc},
	})
	if err != nil {
		return nil, err
	}
	files := []imageFile{{ocispec.ImageLayoutFile, layoutJSON}}
	for _, d := range []ocispec.Descriptor{img.layer, img.config, img.manifest} {
		files = append(files, imageFile{blobPath(d.Digest), img.blobs[d.Digest]})
	}
	files = append(files, imageFile{ocispec.ImageIndexFile, index})
	if withDocker {
		m, err := json.Marshal([]dockerManifest{{
			Config:   blobPath(img.config.Digest),
			RepoTags: []string{reference.FamiliarString(ref)},
			Layers:   []string{blobPath(img.layer.Digest)},
		}})
		if err != nil {
			return nil, err
		}
		files = append(files, imageFile{"manifest.json", m})
	}
	return files, nil
}

// dockerManifest is one entry of docker save's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

type imageFile struct {
	name string
	data []byte
}

func blobPath(d digest.Digest) string {
	return ocispec.ImageBlobsDir + "/" + d.Algorithm().String() + "/" + d.Encoded()
}

// writeTar writes the image as one tarball: an OCI image layout plus docker
// save's manifest.json.
func (img *agentImage) writeTar(w io.Writer, ref reference.NamedTagged) error {
	files, err := img.files(ref, true)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, f := range files {
		for _, dir := range parentDirs(f.name) {
			if dirs[dir] {
				continue
			}
			dirs[dir] = true
			if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: epoch}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o444, Size: int64(len(f.data)), Typeflag: tar.TypeReg, ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// parentDirs lists the folders above a slash-separated path, outermost
// first: "blobs/sha256/x" gives blobs, blobs/sha256.
func parentDirs(name string) []string {
	var dirs []string
	for i := range len(name) {
		if name[i] == '/' {
			dirs = append(dirs, name[:i])
		}
	}
	return dirs
}

// writeLayout writes the image as an OCI image layout in dir (absent or
// empty, checked by the caller).
func (img *agentImage) writeLayout(dir string, ref reference.NamedTagged) error {
	files, err := img.files(ref, false)
	if err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := writeFileAtomic(p, func(w io.Writer) error {
			_, err := w.Write(f.data)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// elfArch maps an ELF machine to the OCI architecture name.
var elfArch = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
	elf.EM_386:     "386",
	elf.EM_ARM:     "arm",
	elf.EM_PPC64:   "ppc64le",
	elf.EM_S390:    "s390x",
	elf.EM_RISCV:   "riscv64",
}

// staticLinuxArch checks that bin is a static Linux executable (no program
// interpreter, no shared libraries: the image has neither) and returns its
// architecture.
func staticLinuxArch(path string, bin []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("%s is not an executable (ELF type %v)", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked (a cgo or -race build?): the image has no libc; build it with CGO_ENABLED=0 (make build)", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return "", fmt.Errorf("%s needs shared libraries %v: the image has none; build it with CGO_ENABLED=0 (make build)", path, libs)
	}
	arch, ok := elfArch[f.Machine]
	if !ok {
		return "", fmt.Errorf("%s is for machine %v, which sandboxd does not build for", path, f.Machine)
	}
	if f.Machine == elf.EM_PPC64 && f.ByteOrder.String() != "LittleEndian" {
		return "", fmt.Errorf("%s is big-endian ppc64, which sandboxd does not build for", path)
	}
	return arch, nil
}

// checkEmptyDir accepts a directory that does not exist or has nothing in it.
func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case len(entries) > 0:
		return fmt.Errorf("%s is not empty", dir)
	}
	return nil
}

// writeFileAtomic writes a file through a temporary one beside it, so a
// failed write leaves no half a tarball under the name asked for.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // gone already after the rename
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
