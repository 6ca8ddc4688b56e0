package inject

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// deployMeta guesses, as Istio does, the workload that owns a pod from its
// controller reference: a ReplicaSet with the pod-template-hash suffix is a
// Deployment's, a ReplicationController with a deploymentconfig label an
// OpenShift DeploymentConfig's, a Job named <name>-<8 to 10 digits> a
// CronJob's. A pod without generateName is its own workload.
func deployMeta(pod *corev1.Pod) Workload {
	w := Workload{Name: pod.Name, Namespace: pod.Namespace}
	w.Kind, w.APIVersion = "Pod", "v1"
	if pod.GenerateName == "" {
		return w
	}
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		w.Kind, w.APIVersion, w.Name = ref.Kind, ref.APIVersion, ref.Name
		hash, rolloutHash := pod.Labels["pod-template-hash"], pod.Labels["rollouts-pod-template-hash"]
		switch {
		case ref.Kind == "ReplicaSet" && hash != "" && strings.HasSuffix(ref.Name, hash):
			w.Name, w.Kind = strings.TrimSuffix(ref.Name, "-"+hash), "Deployment"
		case ref.Kind == "ReplicaSet" && rolloutHash != "" && strings.HasSuffix(ref.Name, rolloutHash):
			w.Name, w.Kind, w.APIVersion = strings.TrimSuffix(ref.Name, "-"+rolloutHash), "Rollout", "v1alpha1"
		case ref.Kind == "ReplicationController" && pod.Labels["deploymentconfig"] != "":
			w.Name, w.Kind = pod.Labels["deploymentconfig"], "DeploymentConfig"
		case ref.Kind == "Job":
			if base, ok := cronJobBase(ref.Name); ok {
				w.Name, w.Kind, w.APIVersion = base, "CronJob", "batch/v1"
			}
		}
		break
	}
	if w.Name == "" {
		w.Name = pod.Name
	}
	return w
}

// cronJobBase strips a "-<8 to 10 digits>" suffix (a CronJob's Job name).
func cronJobBase(job string) (string, bool) {
	i := strings.LastIndexByte(job, '-')
	if i <= 0 {
		return "", false
	}
	digits := job[i+1:]
	if len(digits) < 8 || len(digits) > 10 {
		return "", false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return job[:i], true
}
