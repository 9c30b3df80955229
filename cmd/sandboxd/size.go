package main

import "github.com/sandboxd/sandboxd/internal/bytesize"

// sizeFlag is a byte size given with a binary unit: 10GiB, 512MiB, 1.5GiB
// (K, M, G, T and KiB, MiB, GiB, TiB are all powers of 1024), or 0.
type sizeFlag int64

func (s *sizeFlag) String() string { return bytesize.Format(int64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := bytesize.Parse(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}
