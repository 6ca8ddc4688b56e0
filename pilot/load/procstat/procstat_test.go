package procstat

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReadOwnProcess(t *testing.T) {
	before, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSSBytes <= 0 {
		t.Fatalf("RSS = %d, want > 0", before.RSSBytes)
	}
	if before.CPUSeconds < 0 {
		t.Fatalf("CPU = %v, want >= 0", before.CPUSeconds)
	}
	// Burn CPU until the kernel's tick counter moves: CPU time never goes back.
	after := before
	for sum := 0; after.CPUSeconds <= before.CPUSeconds; {
		for i := range 1_000_000 {
			sum += i
		}
		if after, err = Read(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		_ = sum
	}
	if after.CPUSeconds < before.CPUSeconds {
		t.Fatalf("CPU went back: %v then %v", before.CPUSeconds, after.CPUSeconds)
	}
}

func TestParseStatCommWithSpacesAndParens(t *testing.T) {
	line := "4242 (pilot (x) disc) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 12 0 100 1000000 500 18446744073709551615\n"
	got, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2.87; got != want {
		t.Fatalf("ParseStat = %v, want %v (utime 250 + stime 37 ticks)", got, want)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	if _, err := ParseStat([]byte("1 (x) S 1 2")); err == nil {
		t.Fatal("short stat: want error")
	}
	if _, err := ParseStat([]byte("1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 3 0 0")); err == nil || !contains(err.Error(), "utime") {
		t.Fatalf("bad utime: got %v, want error naming utime", err)
	}
	if _, err := ParseStatusRSS([]byte("Name:\tx\nVmSize:\t100 kB\n")); err == nil || !contains(err.Error(), "VmRSS") {
		t.Fatalf("no VmRSS: got %v, want error naming VmRSS", err)
	}
	rss, err := ParseStatusRSS([]byte("Name:\tx\nVmRSS:\t  2048 kB\n"))
	if err != nil || rss != 2048*1024 {
		t.Fatalf("ParseStatusRSS = %d, %v; want %d", rss, err, 2048*1024)
	}
}

func TestReadFromMissingProcess(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFrom(root, 7)
	if err == nil || !contains(err.Error(), "process "+strconv.Itoa(7)) {
		t.Fatalf("ReadFrom missing files: got %v, want error naming the process", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestPeakRSSSeesAGrowthBetweenTakes grows this process's heap between two
// Takes and checks the window's peak covers it, then that a bad pid reports
// an error rather than a zero peak.
func TestPeakRSSSeesAGrowthBetweenTakes(t *testing.T) {
	w := WatchRSS(t.Context(), os.Getpid(), 10*time.Millisecond)
	start, err := w.Take()
	if err != nil || start <= 0 {
		t.Fatalf("first take: %d, %v", start, err)
	}
	const grow = 64 << 20
	buf := make([]byte, grow)
	for i := range buf { // touch every page so it is resident
		buf[i] = 1
	}
	peak, err := w.Take()
	if err != nil {
		t.Fatal(err)
	}
	if peak < start+grow/2 {
		t.Fatalf("peak %d after touching %d bytes, start %d", peak, grow, start)
	}
	runtime.KeepAlive(buf)

	if _, err := WatchRSS(t.Context(), 1<<30, time.Hour).Take(); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
