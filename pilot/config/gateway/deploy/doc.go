// Package deploy is the automated deployment of Gateway API Gateways, as
// istiod's deployment controller does it: for each Gateway whose class is
// ours (controller istio.io/gateway-controller) and that is not deployed
// manually, the leader keeps a ServiceAccount, a Deployment and a Service
// named NAME-CLASS (and the HorizontalPodAutoscaler and
// PodDisruptionBudget its parametersRef ConfigMap asks for), applied with
// server-side apply (field manager istio.io/gateway-controller) and owned
// by the Gateway. The Deployment's
// pods carry the labels and annotations that make the injection webhook
// (pilot/webhook/inject) add the proxy from its "gateway" template.
//
// Render builds the objects of one Gateway (a pure function); Controller
// applies them, deletes what a Gateway no longer needs, and retries
// failures per Gateway with backoff.
package deploy
