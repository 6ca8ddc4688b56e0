package file

import (
	"io/fs"
	"syscall"
)

// sysFileID fills the device, inode and change time of info.
func sysFileID(info fs.FileInfo) (fileID, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, ctime: st.Ctim.Nano()}, true
}
