package console

import (
	"sort"
	"time"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/xds"
)

// TypeState classifies one type's protocol state.
func TypeState(t xds.TypeSync) State {
	switch {
	case t.SentNonce == "":
		return NotSent
	case t.AckedNonce == t.SentNonce:
		return Synced
	case t.NackAt != nil && (t.AckedAt == nil || t.NackAt.After(*t.AckedAt)):
		return NACK
	default:
		return Stale
	}
}

// ProxyRows joins the sync status of each connection with its parsed node
// (views may lack a connection that closed in between; the row then has no
// type or namespace). Rows are sorted by connection ID.
func ProxyRows(status []xds.SyncStatus, views []xds.ProxyView) []ProxyRow {
	byConn := make(map[string]xds.ProxyView, len(views))
	for _, v := range views {
		byConn[v.ConnectionID] = v
	}
	rows := make([]ProxyRow, 0, len(status))
	for _, st := range status {
		row := ProxyRow{
			ConnectionID: st.ConnectionID,
			NodeID:       clientlog.Truncate(st.NodeID, clientlog.MaxValue),
			IstioVersion: clientlog.Truncate(st.IstioVersion, clientlog.MaxValue),
			Delta:        st.Delta,
			ConnectedAt:  st.ConnectedAt,
		}
		if v, ok := byConn[st.ConnectionID]; ok && v.Proxy != nil {
			row.Type = string(v.Proxy.Type)
			row.Namespace = clientlog.Truncate(v.Proxy.Namespace, clientlog.MaxValue)
		}
		for short, ts := range st.Types {
			row.Types = append(row.Types, TypeRow{
				Type: short, State: TypeState(ts), Version: ts.SentVersion, NackError: ts.NackError,
			})
		}
		sort.Slice(row.Types, func(i, j int) bool { return row.Types[i].Type < row.Types[j].Type })
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ConnectionID < rows[j].ConnectionID })
	return rows
}

// since formats how long ago t was, to the second.
func since(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return now.Sub(t).Truncate(time.Second).String()
}
