package sandbox

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// A container's /etc is not the host's: the default root holds one made
// for containers (makeEtc). It has the files that identify the container
// (accounts, host name, name service), written here, and copies of the
// host's files that libc and common tools read and that say nothing of
// the host's secrets (EtcFromHost). Nothing else of the host's /etc is
// there: not its accounts, keys, credentials of package managers
// (/etc/pip.conf, /etc/npmrc), machine id, or whatever an operator put
// in it. The copy is made when the Manager makes its root: a change to
// the host's /etc reaches containers when the Manager next starts.

// EtcFromHost are the host's /etc entries (patterns as filepath.Glob
// takes them, relative to /etc) copied into a container's /etc: files,
// symbolic links and whole directories, of which only what every user of
// the host may read.
var EtcFromHost = []string{
	// The dynamic linker.
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	// Debian's alternatives: /usr/bin/awk, editor, java, ... link here.
	"alternatives",
	// TLS: the trusted certificates (ssl/certs, Java's keystore among
	// them) and OpenSSL's configuration; never ssl/private.
	"ssl/certs", "ssl/openssl.cnf", "ca-certificates.conf",
	// libc's tables and settings.
	"protocols", "services", "networks", "rpc", "ethertypes", "gai.conf", "host.conf",
	"localtime", "timezone", "locale.alias",
	// What the system is.
	"os-release", "debian_version", "lsb-release",
	// File types, shells, terminals.
	"mime.types", "magic", "magic.mime", "shells", "profile", "profile.d", "bash.bashrc", "inputrc", "terminfo",
	// Language runtimes' own configuration.
	"python3", "python3.*", "java-*", "fonts",
}

// etcFiles are the files of a container's /etc written for it.
var etcFiles = map[string]string{
	"passwd": `root:x:0:0:root:/tmp:/bin/sh
user:x:1000:1000:user:/tmp:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
`,
	"group": `root:x:0:
tty:x:5:
users:x:100:
user:x:1000:
nogroup:x:65534:
`,
	"hostname": "sandbox\n",
	"hosts": `127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
127.0.1.1	sandbox
`,
	// No network: no name server (the resolver tries the local one and
	// fails at once).
	"resolv.conf": "# no network in the sandbox\n",
	"nsswitch.conf": `passwd:         files
group:          files
shadow:         files
gshadow:        files
hosts:          files dns
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
netgroup:       files
`,
}

// etcPlan is the entries of a container's /etc (under "etc"): the
// files above and copies of the host's /etc at hostEtc.
func etcPlan(hostEtc string) (rootPlan, error) {
	plan := rootPlan{
		{rel: "etc", mode: fs.ModeDir | 0o755},
		// df, mount and friends read the mount table here.
		{rel: "etc/mtab", mode: fs.ModeSymlink | 0o777, target: "../proc/self/mounts"},
	}
	for name, content := range etcFiles {
		plan = append(plan, rootEntry{rel: "etc/" + name, mode: 0o644, data: []byte(content)})
	}
	for _, pattern := range EtcFromHost {
		matches, err := filepath.Glob(filepath.Join(hostEtc, pattern))
		if err != nil {
			return nil, fmt.Errorf("etc pattern %q: %w", pattern, err)
		}
		for _, src := range matches {
			rel, err := filepath.Rel(hostEtc, src)
			if err != nil {
				return nil, err
			}
			for dir := filepath.Dir(rel); dir != "."; dir = filepath.Dir(dir) {
				plan = append(plan, rootEntry{rel: filepath.Join("etc", dir), mode: fs.ModeDir | 0o755})
			}
			if plan, err = publicTree(plan, src, filepath.Join("etc", rel)); err != nil {
				return nil, fmt.Errorf("etc %s: %w", rel, err)
			}
		}
	}
	return plan, nil
}

// publicTree adds to plan, at rel, the tree at src: directories that
// every user may list, symbolic links, and the regular files every user
// may read (others are left out, as are devices, FIFOs and sockets).
// Modes are kept, owners are not.
func publicTree(plan rootPlan, src, rel string) (rootPlan, error) {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		sub, _ := filepath.Rel(src, p)
		to := filepath.Join(rel, sub)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if fi.Mode().Perm()&0o005 != 0o005 {
				return filepath.SkipDir
			}
			plan = append(plan, rootEntry{rel: to, mode: fs.ModeDir | fi.Mode().Perm()})
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			plan = append(plan, rootEntry{rel: to, mode: fs.ModeSymlink | 0o777, target: target})
		case fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0:
			plan = append(plan, rootEntry{rel: to, mode: fi.Mode().Perm(), src: p})
		}
		return nil
	})
	return plan, err
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst, perm) // the umask's share
	}
	return err
}
