package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// loopControl is the kernel's allocator of loop devices.
const loopControl = "/dev/loop-control"

// loopSupported reports whether this process can attach loop devices.
func loopSupported() error {
	if os.Geteuid() != 0 {
		return errors.New("the daemon does not run as root: attaching a loop device needs it")
	}
	f, err := os.OpenFile(loopControl, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("no loop devices: %w", err)
	}
	return f.Close()
}

// loopAttach attaches the file at path to a free loop device with
// LOOP_CTL_GET_FREE and LOOP_CONFIGURE (Linux 5.8; LOOP_SET_FD before) and
// returns the device's path. Another process may take the free device
// first: then it asks for the next one.
func loopAttach(path string) (string, error) {
	ctl, err := os.OpenFile(loopControl, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer ctl.Close()
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer file.Close()
	var lastErr error
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		err = loopConfigure(dev, n, file, path)
		if errors.Is(err, unix.EBUSY) {
			lastErr = err
			continue // taken meanwhile
		}
		if err != nil {
			return "", err
		}
		return dev, nil
	}
	return "", fmt.Errorf("no free loop device after 16 tries: %w", lastErr)
}

func loopConfigure(dev string, n int, file *os.File, path string) error {
	d, err := os.OpenFile(dev, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		// A /dev without the node (a static /dev): make it.
		if err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("making %s: %w", dev, err)
		}
		d, err = os.OpenFile(dev, os.O_RDWR, 0)
	}
	if err != nil {
		return err
	}
	defer d.Close()
	var info unix.LoopInfo64
	copy(info.File_name[:len(info.File_name)-1], path)
	err = unix.IoctlLoopConfigure(int(d.Fd()), &unix.LoopConfig{Fd: uint32(file.Fd()), Info: info})
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
		// Before Linux 5.8: set the file, then the name.
		if err = unix.IoctlSetInt(int(d.Fd()), unix.LOOP_SET_FD, int(file.Fd())); err == nil {
			err = unix.IoctlLoopSetStatus64(int(d.Fd()), &info)
			if err != nil {
				_ = unix.IoctlSetInt(int(d.Fd()), unix.LOOP_CLR_FD, 0)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	return nil
}

// loopDetach detaches a loop device (LOOP_CLR_FD). One still in use (its
// filesystem mounted) is marked to detach when it is released. One that is
// free already, or gone, is no error.
func loopDetach(dev string) error {
	d, err := os.OpenFile(dev, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.IoctlSetInt(int(d.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return err
	}
	return nil
}

// loopsOf returns the loop devices backed by the file at path, read from
// /sys/block/loop*/loop/backing_file (the full path, " (deleted)" added
// once the file is gone).
func loopsOf(path string) ([]string, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if backing := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)"); backing == path {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return devs, nil
}
