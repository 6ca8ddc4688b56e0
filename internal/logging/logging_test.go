package logging

import (
	"log/slog"
	"strings"
	"testing"
)

func TestParseLevel(t *testing.T) {
	cases := map[string]slog.Level{
		"info": slog.LevelInfo, "default:debug": slog.LevelDebug,
		"ads:debug,default:warn": slog.LevelWarn, "ads:debug": slog.LevelInfo, "": slog.LevelInfo,
	}
	for in, want := range cases {
		got, err := ParseLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseLevel("default:loud"); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Errorf("want error naming the bad level, got %v", err)
	}
}
