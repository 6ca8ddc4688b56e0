package serviceentry

import (
	"strconv"

	"google.golang.org/protobuf/proto"
	metav1alpha1 "istio.io/api/meta/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
)

// Istio's names for WorkloadEntry health (istio.io/istio pilot/pkg/model/status).
const (
	// HealthCheckAnnotation marks a WorkloadEntry whose health its proxy
	// reports: while its Healthy condition is not True it is left out of EDS.
	HealthCheckAnnotation = "proxy.istio.io/health-checks-enabled"
	// ConditionHealthy is the condition type the reports set.
	ConditionHealthy = "Healthy"
)

// HealthStatus returns the Healthy condition of a WorkloadEntry's status
// alone (type, status, message; no times), as model.Config.Status; nil when
// status has none.
func HealthStatus(status *metav1alpha1.IstioStatus) proto.Message {
	for _, c := range status.GetConditions() {
		if c.GetType() == ConditionHealthy {
			return &metav1alpha1.IstioStatus{Conditions: []*metav1alpha1.IstioCondition{{
				Type: ConditionHealthy, Status: c.GetStatus(), Message: c.GetMessage(),
			}}}
		}
	}
	return nil
}

// Healthy reports whether WorkloadEntry cfg may receive traffic, as istiod
// decides: an entry without the health-check annotation (or with it not
// true) always may; one with it only while its Healthy condition is True,
// so a new entry stays out until its first probe succeeds.
func Healthy(cfg *model.Config) bool {
	if on, err := strconv.ParseBool(cfg.Annotations[HealthCheckAnnotation]); err != nil || !on {
		return true
	}
	st, _ := cfg.Status.(*metav1alpha1.IstioStatus)
	for _, c := range st.GetConditions() {
		if c.GetType() == ConditionHealthy {
			return c.GetStatus() == "True"
		}
	}
	return false
}
