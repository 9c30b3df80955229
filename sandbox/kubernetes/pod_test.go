package kubernetes

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandboxd/sandbox"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const testSession = "0b6f7c1e-5a3d-4f0e-9d2a-7c4e1f2a3b4c"

// podShapes are the profile shapes whose Pods are kept as golden files.
var podShapes = []struct {
	name   string
	cfg    func(*Config)
	opts   sandbox.SessionOptions
	pool   string
	skills []sandbox.SkillMount
}{
	{name: "default", opts: sandbox.SessionOptions{}},
	{name: "pooled", opts: sandbox.SessionOptions{Image: "python:3.12-slim"}, pool: "py/" + `{"image":"python:3.12-slim"}`},
	{name: "bridge", opts: sandbox.SessionOptions{Network: sandbox.NetworkBridge, Limits: sandbox.Limits{Memory: 2 << 30, CPUs: 2}}},
	{name: "allow-hosts", opts: sandbox.SessionOptions{Network: sandbox.NetworkBridge, AllowHosts: []string{"192.0.2.7", "10.1.2.0/24"}}},
	{name: "tmpfs-disk", opts: sandbox.SessionOptions{Limits: sandbox.Limits{Memory: 2 << 30, Disk: 256 << 20}, Env: map[string]string{"HOME": "/home/dev", "LANG": "C.UTF-8"}}},
	{name: "gvisor-writable", opts: sandbox.SessionOptions{Runtime: "gvisor", WritableRootfs: true, Cwd: "/workspace/src", User: "1234:1234",
		Labels: map[string]string{"team": "evals", "note": "a value with spaces: not a label"}}},
	{name: "skills", opts: sandbox.SessionOptions{Skills: []string{"run-tests"}}, skills: []sandbox.SkillMount{{Path: "run-tests", Source: "/srv/skills/run-tests"}}},
	{name: "init-skills", cfg: func(c *Config) { c.AgentVolume = AgentVolumeInit },
		opts: sandbox.SessionOptions{Skills: []string{"all"}}, skills: []sandbox.SkillMount{{Path: "a", Source: "/srv/skills/a"}, {Path: "b/c", Source: "/srv/skills/b/c"}}},
	{name: "init-localhost-seccomp", cfg: func(c *Config) {
		c.AgentVolume, c.SeccompProfile, c.HostUsers, c.Node = AgentVolumeInit, "sandboxd/seccomp.json", true, "node-1"
		c.MaxLifetime, c.Labels = 2*time.Hour, map[string]string{"run": "ci-42"}
	}},
}

// TestPodGolden keeps the Pod and NetworkPolicy of each profile shape in
// testdata/<shape>.yaml (go test -update rewrites them), and checks every
// Pod against the Pod Security "restricted" level, latest version, with the
// admission plugin's own library.
func TestPodGolden(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	for _, shape := range podShapes {
		t.Run(shape.name, func(t *testing.T) {
			r := newTestRuntime(t, newClientset(), &fakeAgent{}, shape.cfg)
			spec := testSpec(t, testSession, shape.opts, shape.pool)
			spec.Skills = shape.skills
			require.NoError(t, r.CheckOptions(spec.Options))
			egress, hosts, err := r.resolveEgress(context.Background(), spec.Options.AllowHosts)
			require.NoError(t, err)
			pod, err := r.buildPod(spec, hosts)
			require.NoError(t, err)
			if r.cfg.MaxLifetime > 0 {
				pod.Spec.ActiveDeadlineSeconds = new(int64(r.cfg.MaxLifetime.Seconds()))
			}
			np := r.buildPolicy(spec, egress)

			res := policy.AggregateCheckResults(eval.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
			assert.True(t, res.Allowed, "Pod Security restricted: %v", res.ForbiddenReasons)

			podY, err := yaml.Marshal(pod)
			require.NoError(t, err)
			npY, err := yaml.Marshal(np)
			require.NoError(t, err)
			got := string(podY) + "---\n" + string(npY)
			file := filepath.Join("testdata", shape.name+".yaml")
			if *update {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err, "run go test -update to write it")
			assert.Equal(t, string(want), got, "the Pod of %s changed: check the diff, then go test -update", shape.name)
		})
	}
}

// TestPodSecurityCatchesAWeakPod keeps the restricted check honest: a Pod
// of ours with one hardening setting undone fails it.
func TestPodSecurityCatchesAWeakPod(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	r := newTestRuntime(t, newClientset(), &fakeAgent{}, nil)
	for name, weaken := range map[string]func(*corev1.Pod){
		"privilege escalation": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = new(true) },
		"capabilities kept":    func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Capabilities = nil },
		"no seccomp":           func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil },
		// With a user namespace (hostUsers: false) the level allows root
		// in it; in the host's user namespace it must be refused.
		"root allowed in the host's user namespace": func(p *corev1.Pod) {
			p.Spec.HostUsers = new(true)
			p.Spec.SecurityContext.RunAsNonRoot, p.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil, nil
		},
		"a host path": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
	} {
		pod, err := r.buildPod(testSpec(t, testSession, sandbox.SessionOptions{}, ""), nil)
		require.NoError(t, err)
		weaken(pod)
		res := policy.AggregateCheckResults(eval.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
		assert.False(t, res.Allowed, name)
	}
}

// TestMetadataSplit: values that fit a label are labels, the rest
// (options JSON, times, image references with ":" or "/") annotations, and
// List gives the manager both as one map.
func TestMetadataSplit(t *testing.T) {
	r := newTestRuntime(t, newClientset(), &fakeAgent{}, nil)
	spec := testSpec(t, testSession, sandbox.SessionOptions{Image: "registry.example/team/image:1.2", Labels: map[string]string{"team": "evals", "why": "no: spaces"}}, "p/"+strings.Repeat("k", 70))
	pod, err := r.buildPod(spec, nil)
	require.NoError(t, err)
	for _, k := range []string{sandbox.LabelManaged, sandbox.LabelSession, LabelScope, "team"} {
		assert.Contains(t, pod.Labels, k)
		assert.NotContains(t, pod.Annotations, k)
	}
	for _, k := range []string{sandbox.LabelOptions, sandbox.LabelCreated, sandbox.LabelImage, sandbox.LabelPool, "why"} {
		assert.Contains(t, pod.Annotations, k)
		assert.NotContains(t, pod.Labels, k)
	}
	assert.Equal(t, spec.Labels[sandbox.LabelOptions], mergedMetadata(pod.ObjectMeta)[sandbox.LabelOptions])
	for k, v := range spec.Labels {
		assert.Equal(t, v, mergedMetadata(pod.ObjectMeta)[k], k)
	}
}
