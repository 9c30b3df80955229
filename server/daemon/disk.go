package daemon

import (
	"fmt"
	"log/slog"

	"github.com/sandboxd/sandboxd/sandbox"
)

// checkDisk refuses disk flags that contradict each other, before
// anything starts.
func (c *Config) checkDisk() error {
	q := int64(c.DiskQuota)
	switch c.DiskBackend {
	case DiskAuto:
	case DiskLoop:
		if c.DiskMB != 0 {
			return usageErrorf("--disk-backend loop with --disk-mb %d: --disk-mb sizes tmpfs volumes; give the size with --disk-quota", c.DiskMB)
		}
		if q == 0 {
			return usageErrorf("--disk-backend loop with --disk-quota 0: give a size, or --disk-backend none")
		}
	case DiskTmpfs:
		if c.DiskMB == 0 {
			return usageErrorf("--disk-backend tmpfs needs --disk-mb N (the size of each volume in MiB)")
		}
	case DiskNone:
		if c.DiskMB != 0 {
			return usageErrorf("--disk-backend none with --disk-mb %d: drop one of them", c.DiskMB)
		}
	default:
		return usageErrorf("--disk-backend %q: want auto, loop, tmpfs or none", c.DiskBackend)
	}
	if q != 0 && (q < sandbox.MinDiskQuota || q > sandbox.MaxDiskQuota) {
		return usageErrorf("--disk-quota %s: want 0 (none) or %d MiB to %d GiB", c.DiskQuota.String(), sandbox.MinDiskQuota>>20, sandbox.MaxDiskQuota>>30)
	}
	return nil
}

// diskLimits are the sessions' default disk limits for the checked flags,
// given whether the runtime can make quota-bound volumes (loopErr). auto
// says at start what it chose when it is not the quota asked for.
func (c *Config) diskLimits(loopErr error, log *slog.Logger) (sandbox.Limits, error) {
	q := int64(c.DiskQuota)
	tmpfs := sandbox.Limits{Disk: int64(c.DiskMB) << 20}
	if c.Backend == BackendKubernetes {
		if c.DiskMB != 0 {
			log.Info("disk limit: memory-backed emptyDir volumes charged to memory", "disk_mb", c.DiskMB)
			return tmpfs, nil
		}
		log.Info("disk limit: each Pod's ephemeral storage; past it the kubelet evicts the Pod", "kube_disk_limit", c.Kube.DiskLimit.String())
		return sandbox.Limits{}, nil
	}
	switch {
	case c.DiskBackend == DiskTmpfs, c.DiskBackend == DiskAuto && c.DiskMB != 0:
		log.Info("disk limit: tmpfs volumes charged to memory", "disk_mb", c.DiskMB)
		return tmpfs, nil
	case c.DiskBackend == DiskNone, q == 0:
		log.Warn("no disk quota: /workspace and the home folder are bounded only by the engine's disk", "disk_backend", c.DiskBackend)
		return sandbox.Limits{}, nil
	case loopErr == nil:
		log.Info("disk quota: an ext4 file on a loop device per volume", "disk_quota", c.DiskQuota.String(), "disk_dir", c.DiskDir)
		return sandbox.Limits{DiskQuota: q}, nil
	case c.DiskBackend == DiskLoop:
		return sandbox.Limits{}, fmt.Errorf("--disk-backend loop: disk quotas are unavailable here: %w", loopErr)
	}
	log.Warn("no disk quota: this daemon cannot make one, so /workspace and the home folder are bounded only by the engine's disk; "+
		"--disk-backend tmpfs --disk-mb N caps them as tmpfs charged to memory, --disk-backend none silences this",
		"reason", loopErr.Error())
	return sandbox.Limits{}, nil
}
