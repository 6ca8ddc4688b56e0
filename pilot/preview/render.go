package preview

import (
	"fmt"
	"io"
	"strings"
)

// Render writes res for a terminal: the objects, the summary, then per
// proxy and type the resources added (+), removed (-) and changed (~),
// each change as "path: old → new".
func Render(w io.Writer, res *Result) error {
	var b strings.Builder
	for _, o := range res.Objects {
		fmt.Fprintf(&b, "%s %s/%s: %s\n", o.Kind, o.Namespace, o.Name, o.Action)
	}
	if !res.Valid {
		b.WriteString("invalid change, nothing computed:\n")
		for _, e := range res.Errors {
			fmt.Fprintf(&b, "  %s\n", e)
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	b.WriteString(res.Summary + "\n")
	for _, p := range res.Proxies {
		fmt.Fprintf(&b, "\n%s (%s)\n", p.ConnectionID, p.NodeID)
		for _, t := range p.Types {
			fmt.Fprintf(&b, "  %s\n", t.Type)
			if t.Error != "" {
				fmt.Fprintf(&b, "    ! %s\n", t.Error)
			}
			for _, e := range t.Invalid {
				fmt.Fprintf(&b, "    ! invalid (a proxy would NACK it): %s\n", e)
			}
			for _, n := range t.Added {
				fmt.Fprintf(&b, "    + %s\n", n)
			}
			for _, n := range t.Removed {
				fmt.Fprintf(&b, "    - %s\n", n)
			}
			for _, r := range t.Changed {
				fmt.Fprintf(&b, "    ~ %s\n", r.Name)
				for _, c := range r.Changes {
					fmt.Fprintf(&b, "        %s\n", c)
				}
				if r.Truncated {
					b.WriteString("        … more changes left out\n")
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
