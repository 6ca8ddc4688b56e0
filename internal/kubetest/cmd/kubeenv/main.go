// Command kubeenv runs the test environment's etcd and kube-apiserver
// outside a test, for measurements (hack/load-bench.sh KUBE=1): it starts
// them, installs the given CRDs, writes an admin kubeconfig, and stops them
// on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

func main() {
	crds := flag.String("crds", "", "YAML file of CustomResourceDefinitions to install")
	out := flag.String("kubeconfig-out", "", "where to copy the admin kubeconfig (required)")
	flag.Parse()
	if err := run(*crds, *out); err != nil {
		fmt.Fprintln(os.Stderr, "kubeenv:", err)
		os.Exit(1)
	}
}

func run(crds, out string) error {
	if out == "" {
		return fmt.Errorf("--kubeconfig-out is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	env, err := kubetest.New(ctx, kubetest.Options{Logger: log})
	if err != nil {
		return err
	}
	defer env.Stop()
	if crds != "" {
		if err := kubetest.InstallCRDs(ctx, env.Config(), crds); err != nil {
			return err
		}
	}
	raw, err := os.ReadFile(env.Kubeconfig())
	if err != nil {
		return err
	}
	if err := os.WriteFile(out+".tmp", raw, 0o600); err != nil {
		return err
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return err
	}
	log.Info("API server ready", "kubeconfig", out)
	<-ctx.Done()
	return nil
}
