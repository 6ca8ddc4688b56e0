package sim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FullPushMetric counts PushContext builds: one per full push.
const FullPushMetric = "pilot_pushcontext_init_seconds_count"

// scrapeCounter fetches a Prometheus text exposition from url and returns
// the sum of metric's samples over all label sets.
func scrapeCounter(ctx context.Context, url, metric string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("metrics URL %q: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics %s: status %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", url, err)
	}
	v, err := SumMetric(b, metric)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", url, err)
	}
	return v, nil
}

// SumMetric returns the sum of the samples of metric (name alone, or name
// followed by {labels}) in a Prometheus text exposition; an error if there
// are none.
func SumMetric(text []byte, metric string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("%s: unterminated labels in %q", metric, line)
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("%s: no value in %q", metric, line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: value in %q: %w", metric, line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s: not exposed", metric)
	}
	return sum, nil
}
