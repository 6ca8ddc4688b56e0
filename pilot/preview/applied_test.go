package preview_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/protodiff"
	"github.com/meshpilot/meshpilot/model"
)

// TestPreviewMatchesTheAppliedChange previews reviews 50/50, then applies
// it for real (the config file rewritten; the watcher loads it and the
// server pushes) and compares: the proxies whose served resources changed
// are exactly those the preview listed, only in RDS 9080, and the diff of
// what each actually received equals the previewed changes.
func TestPreviewMatchesTheAppliedChange(t *testing.T) {
	srv, clients, dir := bootinfoReady(t, 0)
	served := counted(t, srv, clients).served
	code, res, raw := postPreview(t, srv, "", reviews5050)
	if code != 200 || !res.Valid {
		t.Fatalf("preview: %d %s", code, raw)
	}
	predicted := map[string][]protodiff.Change{}
	for _, p := range res.Proxies {
		predicted[strings.Split(p.NodeID, "~")[2]] = p.Types[0].Changed[0].Changes
	}
	if len(predicted) != 2 {
		t.Fatalf("preview: want 2 proxies changed: %s", raw)
	}

	seq := srv.Discovery().PushSeq()
	if err := os.WriteFile(filepath.Join(dir, "virtual-service-reviews-80-20.yaml"), []byte(reviews5050), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for srv.Discovery().PushSeq() == seq || !synced(srv, len(clients)) {
		if time.Now().After(deadline) {
			t.Fatalf("the applied change was not pushed: %+v", srv.Discovery().SyncStatus())
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, as xds tests' eventually
	}

	after := counted(t, srv, clients).served
	matched := 0
	for name := range clients {
		node := pods[name]
		for typ, res := range served[name] {
			for n, b := range res {
				got := after[name][typ][n]
				if bytes.Equal(b, got) {
					continue
				}
				if typ != model.RouteType || n != "9080" {
					t.Errorf("%s: %s %s changed, the preview did not say so", name, model.ShortType(typ), n)
					continue
				}
				want, ok := predicted[node]
				if !ok {
					t.Errorf("%s: RDS 9080 changed, the preview said no change", name)
					continue
				}
				actual := diffServed(t, b, got)
				if changesText(actual) != changesText(want) {
					t.Errorf("%s: received\n%s\npreviewed\n%s", name, changesText(actual), changesText(want))
				}
				delete(predicted, node)
				matched++
			}
		}
	}
	for node := range predicted {
		t.Errorf("%s: the preview listed a change it did not receive", node)
	}
	if matched != 2 {
		t.Errorf("%d proxies received the previewed change, want 2", matched)
	}
}

// pods are the pod part of each bookinfo client's node ID.
var pods = map[string]string{"productpage": "productpage-v1-1.default", "other": "client-1.other", "hidden": "client-2.hidden"}

// diffServed diffs two served resources (marshalled Anys).
func diffServed(t *testing.T, before, after []byte) []protodiff.Change {
	t.Helper()
	a, b := &anypb.Any{}, &anypb.Any{}
	if err := proto.Unmarshal(before, a); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(after, b); err != nil {
		t.Fatal(err)
	}
	changes, _ := protodiff.Diff(a, b, 0)
	return changes
}

func changesText(cs []protodiff.Change) string {
	var lines []string
	for _, c := range cs {
		lines = append(lines, c.String())
	}
	return strings.Join(lines, "\n")
}

// TestPreviewsDuringAPush runs previews back to back, from two clients at
// once, while a real change is applied and pushed: the push completes, each
// preview is either computed or refused as busy (429; one at a time), and
// under -race nothing they share with the push pipeline races.
func TestPreviewsDuringAPush(t *testing.T) {
	srv, clients, dir := bootinfoReady(t, 0)
	stop := make(chan struct{})
	codes := make(chan int, 1024)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post("http://"+srv.DebugListenAddr()+"/debug/preview", "application/yaml", strings.NewReader(reviews5050))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				select {
				case codes <- resp.StatusCode:
				default:
				}
			}
		})
	}
	seq := srv.Discovery().PushSeq()
	if err := os.WriteFile(filepath.Join(dir, "virtual-service-reviews-80-20.yaml"), []byte(reviews5050), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for srv.Discovery().PushSeq() == seq || !synced(srv, len(clients)) {
		if time.Now().After(deadline) {
			t.Fatalf("the change was not pushed while previews ran: %+v", srv.Discovery().SyncStatus())
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, as xds tests' eventually
	}
	close(stop)
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("preview answered %d", c)
		}
	}
	if ok == 0 {
		t.Error("no preview was computed during the push")
	}
	routes, err := clients["productpage"].Decoded(model.RouteType)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(routeJSON(routes["9080"]), `"weight":50`) {
		t.Errorf("productpage did not receive the 50/50 routes")
	}
}

func routeJSON(m proto.Message) string {
	b, _ := protojson.Marshal(m)
	return strings.ReplaceAll(string(b), " ", "")
}
