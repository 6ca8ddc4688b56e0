// Package readiness runs a VM's readiness probe (the WorkloadGroup's
// probe, which reaches the agent as ProxyConfig.readinessProbe) and
// reports each change of the workload's health, as istio-agent does on
// VMs: the xDS proxy sends it to the control plane, which sets the
// WorkloadEntry's Healthy condition.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	networking "istio.io/api/networking/v1alpha3"
)

// Kubernetes' probe defaults, which Istio's probe fields mirror.
const (
	defaultTimeout   = time.Second
	defaultPeriod    = 10 * time.Second
	defaultSuccesses = 1
	defaultFailures  = 3
	// maxBody is how much of an HTTP answer is read (then discarded).
	maxBody = 4 << 10
)

// Report is one change of health: healthy, or not with Message saying why.
type Report struct {
	Healthy bool
	Message string
}

// Prober runs one probe.
type Prober struct {
	probe  *networking.ReadinessProbe
	check  func(ctx context.Context) error
	report func(Report)
	log    *slog.Logger
}

// New returns a prober of p calling report on each change (the first
// result included); it errors when p names no method.
func New(p *networking.ReadinessProbe, report func(Report), log *slog.Logger) (*Prober, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pr := &Prober{probe: p, report: report, log: log}
	switch m := p.GetHealthCheckMethod().(type) {
	case *networking.ReadinessProbe_HttpGet:
		pr.check = httpCheck(m.HttpGet)
	case *networking.ReadinessProbe_TcpSocket:
		pr.check = tcpCheck(m.TcpSocket)
	case *networking.ReadinessProbe_Exec:
		if len(m.Exec.GetCommand()) == 0 {
			return nil, errors.New("readinessProbe.exec: command is empty")
		}
		pr.check = execCheck(m.Exec)
	default:
		return nil, errors.New("readinessProbe: no httpGet, tcpSocket or exec")
	}
	return pr, nil
}

// Run probes every period until ctx is done: healthy after
// successThreshold successes in a row, unhealthy after failureThreshold
// failures, each change reported once.
func (p *Prober) Run(ctx context.Context) {
	timeout := seconds(p.probe.GetTimeoutSeconds(), defaultTimeout)
	period := seconds(p.probe.GetPeriodSeconds(), defaultPeriod)
	needOK := int(max(p.probe.GetSuccessThreshold(), 0))
	if needOK == 0 {
		needOK = defaultSuccesses
	}
	needFail := int(max(p.probe.GetFailureThreshold(), 0))
	if needFail == 0 {
		needFail = defaultFailures
	}
	wait := time.Duration(max(p.probe.GetInitialDelaySeconds(), 0)) * time.Second
	var oks, fails int
	var last *Report
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = period
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := p.check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var now *Report
		if err == nil {
			oks, fails = oks+1, 0
			if oks >= needOK {
				now = &Report{Healthy: true}
			}
		} else {
			oks, fails = 0, fails+1
			if fails >= needFail {
				now = &Report{Message: err.Error()}
			}
		}
		if now != nil && (last == nil || *last != *now) {
			last = now
			p.log.Info("readiness probe changed", "healthy", now.Healthy, "message", now.Message)
			p.report(*now)
		}
	}
}

func seconds(n int32, def time.Duration) time.Duration {
	if n <= 0 {
		return def
	}
	return time.Duration(n) * time.Second
}

func hostPort(host string, port uint32) string {
	if host == "" {
		host = "localhost"
	}
	return net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10))
}

// httpCheck succeeds on a status from 200 to 399, as Kubernetes'.
func httpCheck(c *networking.HTTPHealthCheckConfig) func(context.Context) error {
	scheme := strings.ToLower(c.GetScheme())
	if scheme == "" {
		scheme = "http"
	}
	url := scheme + "://" + hostPort(c.GetHost(), c.GetPort()) + "/" + strings.TrimPrefix(c.GetPath(), "/")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for _, h := range c.GetHttpHeaders() {
			req.Header.Add(h.GetName(), h.GetValue())
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// tcpCheck succeeds when a connection opens.
func tcpCheck(c *networking.TCPHealthCheckConfig) func(context.Context) error {
	addr := hostPort(c.GetHost(), c.GetPort())
	return func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("connect %s: %w", addr, err)
		}
		return conn.Close()
	}
}

// execCheck succeeds when the command exits 0.
func execCheck(c *networking.ExecHealthCheckConfig) func(context.Context) error {
	args := c.GetCommand()
	return func(ctx context.Context) error {
		if err := exec.CommandContext(ctx, args[0], args[1:]...).Run(); err != nil {
			return fmt.Errorf("%s: %w", args[0], err)
		}
		return nil
	}
}
