//go:build !linux

package file

import "io/fs"

// sysFileID reports no identity: off Linux every file is read at each load.
func sysFileID(fs.FileInfo) (fileID, bool) { return fileID{}, false }
