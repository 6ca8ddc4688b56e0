// Package leaderelection runs singleton work (for example the root-cert
// ConfigMap distribution) on one control plane replica at a time, elected
// through a coordination.k8s.io Lease in the control plane's namespace.
package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lease names, as Istio names its elections.
const (
	// NamespaceController guards the per-namespace root-cert ConfigMap writer.
	NamespaceController = "istio-namespace-controller-election"
)

// Istio's election timings.
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Options configure an Elector. Zero durations take the defaults.
type Options struct {
	// Client writes the Leases (get, create, update on leases in Namespace).
	Client kubernetes.Interface
	// Namespace holds the Leases (the control plane's namespace).
	Namespace string
	// Identity names this replica in the Lease (required; unique per
	// replica, as the pod name is).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod as client-go's elector.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Log                                       *slog.Logger
}

// Elector campaigns for named Leases on behalf of this replica.
type Elector struct {
	opts    Options
	leading atomic.Int32
}

// New returns an Elector; it does nothing until Run.
func New(opts Options) (*Elector, error) {
	if opts.Client == nil || opts.Namespace == "" || opts.Identity == "" {
		return nil, errors.New("leader election: Client, Namespace and Identity are required")
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.RenewDeadline <= 0 {
		opts.RenewDeadline = DefaultRenewDeadline
	}
	if opts.RetryPeriod <= 0 {
		opts.RetryPeriod = DefaultRetryPeriod
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Elector{opts: opts}, nil
}

// Identity is this replica's holder identity.
func (e *Elector) Identity() string { return e.opts.Identity }

// Run campaigns for Lease name until ctx is done. While this replica
// leads, fn runs with a context that is cancelled when leadership is lost
// (or ctx ends); after a loss Run campaigns again. fn must return when its
// context is done. Run returns once fn has returned and the Lease is
// released.
func (e *Elector) Run(ctx context.Context, name string, fn func(ctx context.Context)) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: e.opts.Namespace},
		Client:     e.opts.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.opts.Identity},
	}
	log := e.opts.Log.With("lease", e.opts.Namespace+"/"+name, "identity", e.opts.Identity)
	for ctx.Err() == nil {
		// client-go calls OnStartedLeading on a goroutine of its own; hand
		// the leader context over instead, so fn runs here and Run can wait.
		leadCh := make(chan context.Context, 1)
		el, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			Name:            name,
			LeaseDuration:   e.opts.LeaseDuration,
			RenewDeadline:   e.opts.RenewDeadline,
			RetryPeriod:     e.opts.RetryPeriod,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) { leadCh <- lctx },
				OnStoppedLeading: func() {},
				OnNewLeader: func(id string) {
					if id != e.opts.Identity {
						log.Info("leader elected elsewhere", "leader", id)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election %s: %w", name, err)
		}
		elDone := make(chan struct{})
		go func() {
			defer close(elDone)
			el.Run(ctx)
		}()
		select {
		case lctx := <-leadCh:
			e.lead(log, lctx, fn)
		case <-elDone:
		}
		<-elDone
		// The elector returns when leadership is lost or ctx ends; campaign
		// again after one retry period in the first case.
		t := time.NewTimer(e.opts.RetryPeriod)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

func (e *Elector) lead(log *slog.Logger, ctx context.Context, fn func(context.Context)) {
	e.leading.Add(1)
	defer e.leading.Add(-1)
	log.Info("leading")
	fn(ctx)
	log.Info("stopped leading")
}

// Leading reports how many Leases this elector currently leads.
func (e *Elector) Leading() int { return int(e.leading.Load()) }
