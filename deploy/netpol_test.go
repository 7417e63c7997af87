package deploy

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// endpoint is one end of a connection: a pod (its labels, namespace, its
// namespace's labels and its IP) or, with no namespace, an address outside
// the cluster. ports are a pod's named container ports.
type endpoint struct {
	labels, nsLabels map[string]string
	namespace        string
	ip               netip.Addr
	ports            map[string]int32
}

// external is an address outside the cluster.
func external(addr string) endpoint { return endpoint{ip: netip.MustParseAddr(addr)} }

// selects reports whether a label selector selects a label set; a nil
// selector selects nothing, an empty one everything.
func selects(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(set))
}

// allowed evaluates the NetworkPolicies of namespace ns as a network plugin
// does, for a connection from src to dst on port (proto): the source's
// policies must let it out and the destination's let it in. A pod no
// policy of a direction selects is open in that direction; one that some
// policy selects allows what one of their rules allows. Only pods of ns
// are subject to ns's policies. ipBlock peers match pods' IPs too (as
// several network plugins do), so a rule meant for outside addresses must
// except the pods' range to keep them out.
func allowed(policies []*networkingv1.NetworkPolicy, ns string, src, dst endpoint, port int32, proto corev1.Protocol) bool {
	return direction(policies, ns, src, dst, port, proto, networkingv1.PolicyTypeEgress) &&
		direction(policies, ns, dst, src, port, proto, networkingv1.PolicyTypeIngress)
}

// direction evaluates one direction for the pod subject: Egress to peer,
// or Ingress from peer. The port is the destination's (peer's for Egress,
// subject's for Ingress).
func direction(policies []*networkingv1.NetworkPolicy, ns string, subject, peer endpoint, port int32,
	proto corev1.Protocol, typ networkingv1.PolicyType) bool {
	if subject.namespace != ns {
		return true
	}
	dstPorts := subject.ports
	if typ == networkingv1.PolicyTypeEgress {
		dstPorts = peer.ports
	}
	isolated := false
	for _, p := range policies {
		if p.Namespace != ns || !selects(&p.Spec.PodSelector, subject.labels) || !hasType(p, typ) {
			continue
		}
		isolated = true
		if typ == networkingv1.PolicyTypeIngress {
			for _, rule := range p.Spec.Ingress {
				if portMatches(rule.Ports, port, proto, dstPorts) && peerMatches(rule.From, ns, peer) {
					return true
				}
			}
			continue
		}
		for _, rule := range p.Spec.Egress {
			if portMatches(rule.Ports, port, proto, dstPorts) && peerMatches(rule.To, ns, peer) {
				return true
			}
		}
	}
	return !isolated
}

func hasType(p *networkingv1.NetworkPolicy, typ networkingv1.PolicyType) bool {
	if len(p.Spec.PolicyTypes) == 0 {
		return typ == networkingv1.PolicyTypeIngress || len(p.Spec.Egress) > 0 // Kubernetes' defaulting
	}
	for _, t := range p.Spec.PolicyTypes {
		if t == typ {
			return true
		}
	}
	return false
}

// portMatches reports whether a rule's ports take port over proto; a named
// port is looked up among the destination's container ports.
func portMatches(ports []networkingv1.NetworkPolicyPort, port int32, proto corev1.Protocol, named map[string]int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		want := corev1.ProtocolTCP
		if p.Protocol != nil {
			want = *p.Protocol
		}
		if want != proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String && named[p.Port.StrVal] == port && port != 0:
			return true
		case p.Port.Type == intstr.Int && p.Port.IntVal == port:
			return true
		}
	}
	return false
}

func peerMatches(peers []networkingv1.NetworkPolicyPeer, ns string, e endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		switch {
		case peer.IPBlock != nil:
			if inBlock(peer.IPBlock, e.ip) {
				return true
			}
		case e.namespace == "":
			// an address outside the cluster matches only ipBlock peers
		case peer.NamespaceSelector == nil:
			if e.namespace == ns && selects(peer.PodSelector, e.labels) {
				return true
			}
		case selects(peer.NamespaceSelector, e.nsLabels):
			if peer.PodSelector == nil || selects(peer.PodSelector, e.labels) {
				return true
			}
		}
	}
	return false
}

func inBlock(b *networkingv1.IPBlock, ip netip.Addr) bool {
	in := func(cidr string) bool {
		p, err := netip.ParsePrefix(cidr)
		return err == nil && ip.IsValid() && p.Contains(ip)
	}
	if !in(b.CIDR) {
		return false
	}
	for _, ex := range b.Except {
		if in(ex) {
			return false
		}
	}
	return true
}

// TestNetworkPolicyEvaluation shows that allowed reads policies as a
// network plugin does.
func TestNetworkPolicyEvaluation(t *testing.T) {
	t.Parallel()
	pod := func(component, ip string) endpoint {
		return endpoint{labels: map[string]string{componentLabel: component}, namespace: namespace,
			nsLabels: map[string]string{"kubernetes.io/metadata.name": namespace}, ip: netip.MustParseAddr(ip),
			ports: map[string]int32{"http": 9090, "metrics": 9091}}
	}
	executor, reconciler, scheduler := pod("executor", "10.244.0.2"), pod("abort-reconciler", "10.244.0.3"), pod("scheduler", "10.244.0.4")
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	http := intstr.FromString("http")
	policy := func(sel string, types []networkingv1.PolicyType, in []networkingv1.NetworkPolicyIngressRule,
		out []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
		p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: types, Ingress: in, Egress: out}}
		if sel != "" {
			p.Spec.PodSelector.MatchLabels = map[string]string{componentLabel: sel}
		}
		return p
	}
	ingress := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egress := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	onlyReconciler := []networkingv1.NetworkPolicyIngressRule{{
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{componentLabel: "abort-reconciler"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &http}},
	}}
	ps := func(p ...*networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy { return p }
	ok := func(p []*networkingv1.NetworkPolicy, src, dst endpoint, port int32) bool {
		return allowed(p, namespace, src, dst, port, tcp)
	}
	require.True(t, ok(nil, scheduler, executor, 9090), "no policy: every connection")
	require.True(t, ok(ps(policy("executor", ingress, onlyReconciler, nil)), reconciler, executor, 9090))
	require.False(t, ok(ps(policy("executor", ingress, onlyReconciler, nil)), scheduler, executor, 9090))
	require.False(t, ok(ps(policy("executor", ingress, onlyReconciler, nil)), reconciler, executor, 9091), "another port")
	require.False(t, ok(ps(policy("executor", ingress, nil, nil)), reconciler, executor, 9090), "no rule: nothing")
	require.True(t, ok(ps(policy("executor", ingress, []networkingv1.NetworkPolicyIngressRule{{}}, nil)), scheduler, executor, 9090), "an empty rule: everything")
	elsewhere := reconciler
	elsewhere.namespace, elsewhere.nsLabels = "other", map[string]string{"kubernetes.io/metadata.name": "other"}
	require.False(t, ok(ps(policy("executor", ingress, onlyReconciler, nil)), elsewhere, executor, 9090),
		"a podSelector without namespaceSelector means the policy's namespace")

	deny := policy("", []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, nil, nil)
	require.False(t, ok(ps(deny), scheduler, executor, 9090), "default deny: nothing in")
	require.False(t, ok(ps(deny), executor, external("203.0.113.7"), 443), "default deny: nothing out")
	require.False(t, ok(ps(deny, policy("executor", ingress, onlyReconciler, nil)), reconciler, executor, 9090),
		"an ingress allow does not open the source's egress")
	toExecutor := []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{componentLabel: "executor"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &http}},
	}}
	both := ps(deny, policy("executor", ingress, onlyReconciler, nil), policy("abort-reconciler", egress, nil, toExecutor))
	require.True(t, ok(both, reconciler, executor, 9090), "egress of the source and ingress of the target")
	require.False(t, ok(both, reconciler, scheduler, 9090), "egress to another pod")
	internet := []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
		CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "169.254.0.0/16"}}}}}}
	out := ps(deny, policy("executor", egress, nil, internet))
	require.True(t, ok(out, executor, external("203.0.113.7"), 443), "an ipBlock takes what it holds")
	require.False(t, ok(out, executor, external("169.254.169.254"), 80), "and not what it excepts")
	require.False(t, ok(out, executor, scheduler, 9091), "pods' IPs are matched by ipBlock too: excepted here")
	dns := []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptr(intstr.FromInt32(53))}}}}
	require.True(t, allowed(ps(deny, policy("", egress, nil, dns)), namespace, executor, external("10.96.0.10"), 53, udp))
	require.False(t, allowed(ps(deny, policy("", egress, nil, dns)), namespace, executor, external("10.96.0.10"), 53, tcp), "another protocol")
}

func ptr[T any](v T) *T { return &v }
