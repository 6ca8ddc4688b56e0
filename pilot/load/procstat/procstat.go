// Package procstat reads a process's CPU time and resident memory from
// Linux's /proc, so pilot-load can report what a control plane spent.
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is the unit of utime and stime in /proc/PID/stat. It is
// USER_HZ, fixed at 100 in Linux's user-space ABI on every architecture Go
// supports (what `getconf CLK_TCK` prints); it is assumed, not queried.
const ClockTicks = 100

// Sample is one reading of a process.
type Sample struct {
	// At is when the reading was taken.
	At time.Time
	// CPUSeconds is user plus system CPU time since the process started.
	CPUSeconds float64
	// RSSBytes is the resident set size (VmRSS).
	RSSBytes int64
}

// Read samples process pid from /proc.
func Read(pid int) (Sample, error) {
	return ReadFrom("/proc", pid)
}

// ReadFrom samples process pid from a proc file system mounted at root.
func ReadFrom(root string, pid int) (Sample, error) {
	dir := filepath.Join(root, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Sample{}, fmt.Errorf("process %d: %w", pid, err)
	}
	cpu, err := ParseStat(stat)
	if err != nil {
		return Sample{}, fmt.Errorf("process %d: %s: %w", pid, filepath.Join(dir, "stat"), err)
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return Sample{}, fmt.Errorf("process %d: %w", pid, err)
	}
	rss, err := ParseStatusRSS(status)
	if err != nil {
		return Sample{}, fmt.Errorf("process %d: %s: %w", pid, filepath.Join(dir, "status"), err)
	}
	return Sample{At: time.Now(), CPUSeconds: cpu, RSSBytes: rss}, nil
}

// ParseStat returns utime+stime in seconds from the content of
// /proc/PID/stat. The command name (field 2) is in parentheses and may hold
// spaces and parentheses, so fields are counted from the last ')'.
func ParseStat(b []byte) (float64, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, fmt.Errorf("field comm: no closing parenthesis")
	}
	// After ")" come fields 3 (state) onwards; utime is field 14, stime 15.
	rest := strings.Fields(string(b[end+1:]))
	const utimeAt, stimeAt = 14 - 3, 15 - 3
	if len(rest) <= stimeAt {
		return 0, fmt.Errorf("want at least 15 fields, got %d", len(rest)+2)
	}
	utime, err := strconv.ParseUint(rest[utimeAt], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field utime: %w", err)
	}
	stime, err := strconv.ParseUint(rest[stimeAt], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field stime: %w", err)
	}
	return float64(utime+stime) / ClockTicks, nil
}

// ParseStatusRSS returns VmRSS in bytes from the content of /proc/PID/status.
func ParseStatusRSS(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "VmRSS" {
			continue
		}
		f := strings.Fields(value)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("field VmRSS %q: want \"N kB\"", strings.TrimSpace(value))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field VmRSS: %w", err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("field VmRSS: missing")
}

// Self samples the calling process (pilot-load itself).
func Self() (Sample, error) { return Read(os.Getpid()) }
