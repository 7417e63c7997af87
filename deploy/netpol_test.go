package deploy

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// peerPod is a pod that opens a connection: its labels and its namespace's.
type peerPod struct {
	labels, nsLabels map[string]string
	namespace        string
}

// selects reports whether a label selector selects a label set; a nil
// selector selects nothing, an empty one everything.
func selects(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(set))
}

// ingressAllowed evaluates the NetworkPolicies of namespace ns as a network
// plugin does, for a connection from src to a pod labelled dst on the
// container port port (named portName): a pod no Ingress policy selects
// takes every connection; one that some policy selects takes those that
// one of its rules allows. It reads podSelector and namespaceSelector peers
// (not ipBlock, which these manifests do not use).
func ingressAllowed(policies []*networkingv1.NetworkPolicy, ns string, dst map[string]string,
	port int32, portName string, src peerPod) bool {
	isolated := false
	for _, p := range policies {
		if p.Namespace != ns || !selects(&p.Spec.PodSelector, dst) || !hasIngressType(p) {
			continue
		}
		isolated = true
		for _, rule := range p.Spec.Ingress {
			if portMatches(rule.Ports, port, portName) && peerMatches(rule.From, ns, src) {
				return true
			}
		}
	}
	return !isolated
}

func hasIngressType(p *networkingv1.NetworkPolicy) bool {
	if len(p.Spec.PolicyTypes) == 0 {
		return true // Ingress is implied
	}
	for _, t := range p.Spec.PolicyTypes {
		if t == networkingv1.PolicyTypeIngress {
			return true
		}
	}
	return false
}

func portMatches(ports []networkingv1.NetworkPolicyPort, port int32, name string) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String && p.Port.StrVal == name:
			return true
		case p.Port.Type == intstr.Int && p.Port.IntVal == port:
			return true
		}
	}
	return false
}

func peerMatches(from []networkingv1.NetworkPolicyPeer, ns string, src peerPod) bool {
	if len(from) == 0 {
		return true
	}
	for _, peer := range from {
		switch {
		case peer.IPBlock != nil:
		case peer.NamespaceSelector == nil:
			if src.namespace == ns && selects(peer.PodSelector, src.labels) {
				return true
			}
		case selects(peer.NamespaceSelector, src.nsLabels):
			if peer.PodSelector == nil || selects(peer.PodSelector, src.labels) {
				return true
			}
		}
	}
	return false
}

// TestNetworkPolicyEvaluation shows that ingressAllowed reads policies as a
// network plugin does.
func TestNetworkPolicyEvaluation(t *testing.T) {
	t.Parallel()
	executor := map[string]string{componentLabel: "executor"}
	reconciler := podPeer(map[string]string{componentLabel: "abort-reconciler"})
	scheduler := podPeer(map[string]string{componentLabel: "scheduler"})
	tcp := corev1.ProtocolTCP
	http := intstr.FromString("http")
	policy := func(rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: executor},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, Ingress: rules}}
	}
	onlyReconciler := networkingv1.NetworkPolicyIngressRule{
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{componentLabel: "abort-reconciler"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &http}},
	}
	allowed := func(p []*networkingv1.NetworkPolicy, port int32, name string, src peerPod) bool {
		return ingressAllowed(p, namespace, executor, port, name, src)
	}
	require.True(t, allowed(nil, 9090, "http", scheduler), "no policy: every connection")
	require.True(t, allowed([]*networkingv1.NetworkPolicy{policy(onlyReconciler)}, 9090, "http", reconciler))
	require.False(t, allowed([]*networkingv1.NetworkPolicy{policy(onlyReconciler)}, 9090, "http", scheduler))
	require.False(t, allowed([]*networkingv1.NetworkPolicy{policy(onlyReconciler)}, 9091, "metrics", reconciler), "another port")
	require.False(t, allowed([]*networkingv1.NetworkPolicy{policy()}, 9090, "http", reconciler), "no rule: nothing")
	require.True(t, allowed([]*networkingv1.NetworkPolicy{policy(networkingv1.NetworkPolicyIngressRule{})}, 9090, "http", scheduler), "an empty rule: everything")
	elsewhere := reconciler
	elsewhere.namespace, elsewhere.nsLabels = "other", map[string]string{"kubernetes.io/metadata.name": "other"}
	require.False(t, allowed([]*networkingv1.NetworkPolicy{policy(onlyReconciler)}, 9090, "http", elsewhere),
		"a podSelector without namespaceSelector means the policy's namespace")
}
