package credentialaccess_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/pilot/config/credentialaccess"
)

// standIn is an API server answering SubjectAccessReviews only, as the
// test says: allowed for the namespaces in allow, failing (500) while fail
// is set, and, while hold is set, only when the test releases the review
// (or after 10 s, or when its client gives up).
type standIn struct {
	srv *httptest.Server
	// arrived announces each review as it arrives.
	arrived chan credentialaccess.Key
	// release lets one held review answer (closing it lets them all).
	release chan struct{}

	mu                    sync.Mutex
	allow                 map[string]bool
	fail, hold            bool
	calls                 []credentialaccess.Key
	inFlight, maxInFlight int
	abandoned             int
}

func newStandIn(t *testing.T) *standIn {
	s := &standIn{arrived: make(chan credentialaccess.Key, 1000), release: make(chan struct{}), allow: map[string]bool{}}
	s.srv = httptest.NewServer(s)
	t.Cleanup(s.srv.Close)
	return s
}

// client is a clientset talking to the stand-in.
func (s *standIn) client(t *testing.T) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (s *standIn) set(f func(s *standIn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// count is the number of reviews received.
func (s *standIn) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
		http.NotFound(w, r)
		return
	}
	var sar authorizationv1.SubjectAccessReview
	if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	user := strings.Split(sar.Spec.User, ":") // system:serviceaccount:NS:SA
	k := credentialaccess.Key{Namespace: sar.Spec.ResourceAttributes.Namespace}
	if len(user) == 4 {
		k.SANamespace, k.ServiceAccount = user[2], user[3]
	}
	s.mu.Lock()
	s.calls = append(s.calls, k)
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	hold := s.hold
	s.mu.Unlock()
	defer s.set(func(s *standIn) { s.inFlight-- })
	s.arrived <- k
	if hold {
		select {
		case <-s.release:
		case <-r.Context().Done():
			s.set(func(s *standIn) { s.abandoned++ })
			return
		case <-time.After(10 * time.Second):
		}
	}
	s.mu.Lock()
	fail, allowed := s.fail, s.allow[k.Namespace]
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Message: "stand-in failure"})
		return
	}
	sar.TypeMeta = metav1.TypeMeta{Kind: "SubjectAccessReview", APIVersion: "authorization.k8s.io/v1"}
	sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allowed}
	if !allowed {
		sar.Status.Reason = "no RBAC policy matched"
	}
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(sar)
}

// next waits for the next review to arrive.
func (s *standIn) next(t *testing.T) credentialaccess.Key {
	t.Helper()
	select {
	case k := <-s.arrived:
		return k
	case <-time.After(time.Minute):
		t.Fatal("no SubjectAccessReview within a minute")
	}
	return credentialaccess.Key{}
}

// clock is a settable time for decision lifetimes.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
