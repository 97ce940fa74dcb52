-- Special files: FIFOs, sockets and device nodes are inodes like any
-- other, their type in the mode's type bits (S_IFIFO, S_IFSOCK, S_IFCHR,
-- S_IFBLK) and in the kind of their entries; a device node also records
-- its device number (Linux's st_rdev encoding), and nothing else of it.
ALTER TABLE inodes ADD COLUMN rdev INTEGER NOT NULL DEFAULT 0;
