package file

import (
	"io/fs"
	"time"
)

// racyWindow is how recent a file's modification time may be for its read
// not to be trusted at the next load: a file written again within the same
// timestamp tick could keep its size and times (Git's "racily clean" rule,
// with room for coarse file system clocks). A rewrite that also sets the
// modification time back still changes the change time (ctime), which no
// program can set.
const racyWindow = 2 * time.Second

// fileID is what identifies one version of a file's content: a file whose
// fileID is unchanged since a read that was not racy has the same content.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // ns since the epoch
}

// identify returns the fileID of info, taken at now, and whether it can be
// trusted at a later load: false when the platform gives no inode and
// change time, or when the file was modified less than racyWindow before
// now.
func identify(info fs.FileInfo, now time.Time) (fileID, bool) {
	id, ok := sysFileID(info)
	if !ok {
		return fileID{}, false
	}
	id.size = info.Size()
	id.mtime = info.ModTime().UnixNano()
	return id, now.UnixNano()-id.mtime >= int64(racyWindow)
}
