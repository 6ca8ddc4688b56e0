package validation

import (
	"regexp/syntax"
	"strconv"
	"strings"
	"testing"
)

func estimate(t *testing.T, re string) int {
	t.Helper()
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		t.Fatal(err)
	}
	n, err := programSize(parsed)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProgramSizeAgainstEnvoy compares the estimate with program sizes
// Envoy reported in its "RE2 program size of N > max program size" errors
// (quoted in public issues): close, and not below Envoy's for the regexes
// that made Envoy refuse a route.
func TestProgramSizeAgainstEnvoy(t *testing.T) {
	cases := []struct {
		re          string
		envoy, want int
	}{
		{`^/user/(488/sms|h5/getJwt|captcha|version/getAIDrawTemplate|version/isMainLand|version/promotionTemplate|version/activityTemplate2).*`, 106, 110},
		{`(^(\/[a-zA-Z]{2}(-[a-zA-Z]{2})?)?\/?activity\/([^\/]+)?-l(\d+)\/([^\/]+)?-t(\d+)\/?$)|(^(\/[a-zA-Z]{2}(-[a-zA-Z]{2})?)?\/?([^\/]+)?-l(\d+)\/([^\/]+)?-t(\d+)\/?$)|(^(\/[a-zA-Z]{2}(-[a-zA-Z]{2})?)?\/?activity\/([^\/]+)?-t(\d+)\/?$)|(^(\/[a-zA-Z]{2}(-[a-zA-Z]{2})?)?\/?([^\/]+)?-t(\d+)(\/.*)?$)`, 222, 265},
	}
	for _, tc := range cases {
		got := estimate(t, tc.re)
		if got != tc.want {
			t.Errorf("estimate of %.30q... = %d, want %d (Envoy: %d)", tc.re, got, tc.want, tc.envoy)
		}
		if got < tc.envoy || got > tc.envoy*6/5+25 {
			t.Errorf("estimate %d too far from Envoy's %d", got, tc.envoy)
		}
	}
}

// TestProgramSizeShape checks the parts of the estimate: anchors are free,
// an unanchored regex pays the ".*?" loop, a non-ASCII literal one
// instruction per UTF-8 byte, "." RE2's compact UTF-8 encoding.
func TestProgramSizeShape(t *testing.T) {
	cases := map[string]int{
		`^a$`:     3,  // fail, 'a', match
		`a`:       5,  // + ".*?" loop: a byte range and the start's list again
		`^é$`:     4,  // two bytes
		`^.$`:     10, // fail, 5 leaves, 3 continuations, match
		`^[a-c]$`: 3,
		`^(a|b)$`: 5, // fail, capture pair around the class [ab], match
	}
	for re, want := range cases {
		if got := estimate(t, re); got != want {
			t.Errorf("estimate(%q) = %d, want %d", re, got, want)
		}
	}
}

// TestRegexLimit: the largest program Envoy's default accepts passes, one
// instruction more is refused with the size and the limit.
func TestRegexLimit(t *testing.T) {
	n := 1
	for estimate(t, "^a{"+strconv.Itoa(n+1)+"}$") <= EnvoyMaxRegexProgramSize {
		n++
	}
	fits, over := "^a{"+strconv.Itoa(n)+"}$", "^a{"+strconv.Itoa(n+1)+"}$"
	if err := checkRegex(fits, EnvoyMaxRegexProgramSize); err != nil {
		t.Errorf("%s: %v", fits, err)
	}
	err := checkRegex(over, EnvoyMaxRegexProgramSize)
	if err == nil || !strings.Contains(err.Error(), "more than Envoy's limit of 100") {
		t.Errorf("%s: err %v, want over the limit", over, err)
	}
	if err := checkRegex(over, 0); err != nil {
		t.Errorf("%s with no limit: %v", over, err)
	}
	if err := checkRegex(strings.Repeat("a", maxRegexLength+1), 0); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("regex over istiod's length: err %v", err)
	}
	if err := checkRegex(strings.Repeat("a", maxRegexLength), 0); err != nil {
		t.Errorf("regex of istiod's length: %v", err)
	}
}
