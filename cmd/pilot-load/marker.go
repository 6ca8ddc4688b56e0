package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

// newMarkerCommand prints marker I, for --change-cmd pipelines such as
// `pilot-load marker {i} | kubectl apply -f -`.
func newMarkerCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "marker I",
		Short: "Print marker ServiceEntry I (marker-I.load.test) as YAML, for --change-cmd",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			i, err := strconv.Atoi(args[0])
			if err != nil || i < 0 {
				return fmt.Errorf("marker index %q: want a number >= 0", args[0])
			}
			b, err := workload.YAML([]workload.Object{workload.Marker(i)})
			if err != nil {
				return err
			}
			_, err = stdout.Write(b)
			return err
		},
	}
}
