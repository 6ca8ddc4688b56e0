package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/pilot/preview"
)

// previewOptions are the flags of pilot-discovery preview.
type previewOptions struct {
	file    string
	server  string
	output  string
	deletes []string
	proxies []string
	timeout time.Duration
}

// errInvalidChange makes preview exit non-zero after printing why.
var errInvalidChange = errors.New("the change is invalid")

func newPreviewCommand(stdin io.Reader) *cobra.Command {
	var o previewOptions
	cmd := &cobra.Command{
		Use:   "preview -f change.yaml [--delete Kind/namespace/name]",
		Short: "Show what a config change would send each connected proxy, without applying it",
		Long: "Posts the change to a running control plane's /debug/preview and prints, per connected proxy\n" +
			"and xDS type, the resources that would be added, removed or changed (field by field).\n" +
			"Nothing is applied. -f - reads the change from stdin.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPreview(cmd.Context(), o, stdin, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "filename", "f", "", "YAML file of Istio objects to create or replace (- for stdin)")
	f.StringVar(&o.server, "server", "http://localhost:8080", "the control plane's debug address")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringArrayVar(&o.deletes, "delete", nil, "an object to delete, Kind/namespace/name (repeatable)")
	f.StringArrayVar(&o.proxies, "proxy", nil, "limit the preview to this proxy, by connection or node ID (repeatable)")
	f.DurationVar(&o.timeout, "timeout", time.Minute, "how long to wait for the preview")
	return cmd
}

func runPreview(ctx context.Context, o previewOptions, stdin io.Reader, out io.Writer) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	if o.file == "" && len(o.deletes) == 0 {
		return errors.New("nothing to preview: give -f FILE and/or --delete Kind/namespace/name")
	}
	var body []byte
	if o.file != "" {
		r := stdin
		if o.file != "-" {
			f, err := os.Open(o.file)
			if err != nil {
				return fmt.Errorf("-f: %w", err)
			}
			defer f.Close()
			r = f
		}
		var err error
		// One byte over the server's limit is enough to be refused with its message.
		if body, err = io.ReadAll(io.LimitReader(r, preview.DefaultMaxBody+1)); err != nil {
			return fmt.Errorf("-f %s: %w", o.file, err)
		}
	}
	u, err := url.Parse(strings.TrimSuffix(o.server, "/") + "/debug/preview")
	if err != nil {
		return fmt.Errorf("--server %q: %w", o.server, err)
	}
	q := u.Query()
	for _, d := range o.deletes {
		q.Add("delete", d)
	}
	for _, p := range o.proxies {
		q.Add("proxy", p)
	}
	u.RawQuery = q.Encode()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("preview at %s: %w", o.server, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("preview at %s: reading the answer: %w", o.server, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnprocessableEntity {
		return fmt.Errorf("preview at %s: %s: %s", o.server, resp.Status, strings.TrimSpace(string(raw)))
	}
	var res preview.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("preview at %s: decoding the answer: %w", o.server, err)
	}
	if o.output == "json" {
		_, err = out.Write(raw)
	} else {
		err = preview.Render(out, &res)
	}
	if err != nil {
		return err
	}
	if !res.Valid {
		return errInvalidChange
	}
	return nil
}
