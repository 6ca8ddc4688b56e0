package multicluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Names Istio gives the remote cluster's reader (its base chart and
// istioctl create-remote-secret).
const (
	// ReaderServiceAccount is the service account whose token a remote
	// secret carries.
	ReaderServiceAccount = "istio-reader-service-account"
	// RemoteSecretPrefix starts a remote secret's name; the cluster ID ends it.
	RemoteSecretPrefix = "istio-remote-secret-"
)

// ReaderClusterRole is the name of the reader's ClusterRole for a control
// plane in namespace ns.
func ReaderClusterRole(ns string) string { return "istio-reader-clusterrole-" + ns }

// ReaderRules are what a remote cluster's registry reads: the chart's
// istio-reader ClusterRole (charts/meshpilot-remote) grants the same.
func ReaderRules() []rbacv1.PolicyRule {
	read := []string{"get", "list", "watch"}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "pods", "nodes", "namespaces", "endpoints"}, Verbs: read},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
	}
}

// RemoteSecretOptions say which cluster a remote secret is for and how the
// control plane reaches it.
type RemoteSecretOptions struct {
	// Client reaches the remote cluster, where the reader lives.
	Client kubernetes.Interface
	// ClusterID names the remote cluster (the secret's data key).
	ClusterID string
	// Namespace is the control plane's (and the reader's) namespace.
	Namespace string
	// ServiceAccount is the reader; empty means ReaderServiceAccount.
	ServiceAccount string
	// Server is the API server address the control plane dials.
	Server string
	// CreateServiceAccount creates the reader (service account, ClusterRole
	// and binding) when missing, as istioctl's --create-service-account.
	CreateServiceAccount bool
	// TokenTimeout bounds the wait for the token controller to fill the
	// reader's token Secret; 0 means a minute.
	TokenTimeout time.Duration
}

// CreateRemoteSecret returns the Secret istioctl create-remote-secret writes
// for a remote cluster: istio-remote-secret-CLUSTER in the control plane's
// namespace, labelled istio/multiCluster=true, annotated
// networking.istio.io/cluster=CLUSTER, holding under key CLUSTER a
// kubeconfig with the reader's long-lived token and the cluster's CA. The
// token is read from (and, when missing, made by creating) the reader's
// kubernetes.io/service-account-token Secret.
func CreateRemoteSecret(ctx context.Context, o RemoteSecretOptions) (*corev1.Secret, error) {
	if o.ClusterID == "" || o.Namespace == "" || o.Server == "" || o.Client == nil {
		return nil, errors.New("create-remote-secret: a cluster name, namespace, server and client are required")
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = ReaderServiceAccount
	}
	if o.TokenTimeout <= 0 {
		o.TokenTimeout = time.Minute
	}
	if o.CreateServiceAccount {
		if err := ensureReader(ctx, o); err != nil {
			return nil, err
		}
	}
	if _, err := o.Client.CoreV1().ServiceAccounts(o.Namespace).Get(ctx, o.ServiceAccount, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("service account %s/%s: %w", o.Namespace, o.ServiceAccount, err)
	}
	token, ca, err := readerToken(ctx, o)
	if err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[o.ClusterID] = &clientcmdapi.Cluster{Server: o.Server, CertificateAuthorityData: ca}
	cfg.AuthInfos[o.ClusterID] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[o.ClusterID] = &clientcmdapi.Context{Cluster: o.ClusterID, AuthInfo: o.ClusterID}
	cfg.CurrentContext = o.ClusterID
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        RemoteSecretPrefix + o.ClusterID,
			Namespace:   o.Namespace,
			Labels:      map[string]string{SecretLabel: "true"},
			Annotations: map[string]string{ClusterAnnotation: o.ClusterID},
		},
		StringData: map[string]string{o.ClusterID: string(kubeconfig)},
	}, nil
}

// tokenSecretName is the reader's token Secret, as istioctl names it.
func tokenSecretName(sa string) string { return sa + "-istio-remote-secret-token" }

// readerToken returns the token and CA of the reader's token Secret,
// creating the Secret when missing and waiting for the token controller.
func readerToken(ctx context.Context, o RemoteSecretOptions) (token string, ca []byte, err error) {
	secrets := o.Client.CoreV1().Secrets(o.Namespace)
	name := tokenSecretName(o.ServiceAccount)
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.Namespace,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: o.ServiceAccount}},
		Type: corev1.SecretTypeServiceAccountToken,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", nil, fmt.Errorf("token secret %s/%s: %w", o.Namespace, name, err)
	}
	wait, cancel := context.WithTimeout(ctx, o.TokenTimeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := secrets.Get(wait, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return "", nil, fmt.Errorf("token secret %s/%s: %w", o.Namespace, name, err)
		}
		if s != nil && len(s.Data[corev1.ServiceAccountTokenKey]) > 0 {
			return string(s.Data[corev1.ServiceAccountTokenKey]), s.Data[corev1.ServiceAccountRootCAKey], nil
		}
		select {
		case <-wait.Done():
			return "", nil, fmt.Errorf("token secret %s/%s: no token from the cluster's token controller: %w", o.Namespace, name, context.Cause(wait))
		case <-tick.C:
		}
	}
}

// ensureReader creates the reader's service account, ClusterRole and
// binding where missing.
func ensureReader(ctx context.Context, o RemoteSecretOptions) error {
	role := ReaderClusterRole(o.Namespace)
	labels := map[string]string{"app": "istio-reader"}
	objs := []struct {
		what   string
		create func() error
	}{
		{"namespace " + o.Namespace, func() error {
			_, err := o.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}, metav1.CreateOptions{})
			return err
		}},
		{"service account " + o.ServiceAccount, func() error {
			_, err := o.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &corev1.ServiceAccount{
				ObjectMeta: metav1.ObjectMeta{Name: o.ServiceAccount, Namespace: o.Namespace, Labels: labels}}, metav1.CreateOptions{})
			return err
		}},
		{"cluster role " + role, func() error {
			_, err := o.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: role, Labels: labels}, Rules: ReaderRules()}, metav1.CreateOptions{})
			return err
		}},
		{"cluster role binding " + role, func() error {
			_, err := o.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: role, Labels: labels},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: o.ServiceAccount, Namespace: o.Namespace}},
			}, metav1.CreateOptions{})
			return err
		}},
	}
	for _, obj := range objs {
		if err := obj.create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", obj.what, err)
		}
	}
	return nil
}
