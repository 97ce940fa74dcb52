// Package durable writes small files so that neither a crash nor a power
// loss leaves a part of one, or takes back one that was written.
package durable

import (
	"errors"
	"os"
	"path/filepath"
)

// WriteFile replaces the file at path with data: written under another
// name, fsynced, renamed into place, and its directory fsynced, so that a
// process killed meanwhile leaves no part of a file, and a power loss
// after it returned cannot take the new one back.
func WriteFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(filepath.Dir(path))
	}
	return err
}

// SyncDir makes the entries of directory dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
