package fsstore

import "computerd/core"

func pathErr(op, p string, err error) error { return &core.PathError{Op: op, Path: p, Err: err} }
