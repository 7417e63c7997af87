package domain

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// KubernetesSpec is the kubernetes plugin's Pod: one Pod per attempt, of
// Image with Command (the image's entrypoint when empty) and Args, Env,
// Resources, NodeSelector and Tolerations, under ServiceAccount, in
// Namespace (the executor's when empty).
type KubernetesSpec struct {
	Image          string                 `json:"image"`
	Command        []string               `json:"command,omitempty"`
	Args           []string               `json:"args,omitempty"`
	Env            map[string]string      `json:"env,omitempty"`
	Resources      *KubernetesResources   `json:"resources,omitempty"`
	NodeSelector   map[string]string      `json:"node_selector,omitempty"`
	Tolerations    []KubernetesToleration `json:"tolerations,omitempty"`
	ServiceAccount string                 `json:"service_account,omitempty"`
	Namespace      string                 `json:"namespace,omitempty"`
}

// KubernetesResources are a Pod container's requests and limits, resource
// name → quantity ("cpu": "500m", "memory": "1Gi").
type KubernetesResources struct {
	Requests map[string]string `json:"requests,omitempty"`
	Limits   map[string]string `json:"limits,omitempty"`
}

// KubernetesToleration is a Pod toleration of a node taint.
type KubernetesToleration struct {
	Key               string `json:"key,omitempty"`
	Operator          string `json:"operator,omitempty"`
	Value             string `json:"value,omitempty"`
	Effect            string `json:"effect,omitempty"`
	TolerationSeconds *int64 `json:"toleration_seconds,omitempty"`
}

// Limits of the kubernetes plugin's fields.
const (
	MaxKubernetesMapEntries = 64
	MaxTolerations          = 64
)

var (
	// quantityPattern is a Kubernetes resource quantity: a decimal number
	// with an optional binary (Ki..Ei), decimal (n..E) or exponent suffix.
	quantityPattern = regexp.MustCompile(`^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$`)
	// qualifiedName is a Kubernetes label key or resource name: an optional
	// DNS-subdomain prefix and "/", then 1-63 of [A-Za-z0-9._-], starting and
	// ending alphanumeric.
	qualifiedName = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	// labelValue is a Kubernetes label value (empty allowed).
	labelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
	// dnsLabel is a Kubernetes namespace name (RFC 1123 label).
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// dnsSubdomain is a Kubernetes service account name.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func (k *KubernetesSpec) validate() []FieldError {
	if k == nil {
		return []FieldError{{".kubernetes", "the kubernetes plugin needs kubernetes: {image, command, args, env, resources, " +
			"node_selector, tolerations, service_account, namespace}"}}
	}
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	if strings.TrimSpace(k.Image) == "" || strings.ContainsAny(k.Image, " \t\r\n\x00") || len(k.Image) > 1024 {
		add(".kubernetes.image", "is required: an image reference such as \"alpine:3\"; got %q", clipText(k.Image))
	}
	errs = append(errs, validateArgv(".kubernetes.command", k.Command, len(k.Command) > 0)...)
	errs = append(errs, validateArgv(".kubernetes.args", k.Args, false)...)
	for _, e := range (Step{Env: k.Env}).validateEnv() {
		errs = append(errs, FieldError{".kubernetes" + e.Field, e.Message})
	}
	if r := k.Resources; r != nil {
		for field, m := range map[string]map[string]string{".kubernetes.resources.requests": r.Requests,
			".kubernetes.resources.limits": r.Limits} {
			if len(m) > MaxKubernetesMapEntries {
				add(field, "has %d entries; at most %d", len(m), MaxKubernetesMapEntries)
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(m)) {
				switch {
				case !qualifiedName.MatchString(name):
					add(field+"."+clipText(name), "is not a resource name such as cpu, memory or example.com/gpu")
				case !quantityPattern.MatchString(m[name]):
					add(field+"."+name, "must be a quantity such as \"500m\", \"2\" or \"1Gi\"; got %q", clipText(m[name]))
				}
			}
		}
	}
	if len(k.NodeSelector) > MaxKubernetesMapEntries {
		add(".kubernetes.node_selector", "has %d entries; at most %d", len(k.NodeSelector), MaxKubernetesMapEntries)
	}
	for _, key := range slices.Sorted(maps.Keys(k.NodeSelector)) {
		if !qualifiedName.MatchString(key) || !labelValue.MatchString(k.NodeSelector[key]) {
			add(".kubernetes.node_selector."+clipText(key), "is not a node label key and value")
		}
	}
	if len(k.Tolerations) > MaxTolerations {
		add(".kubernetes.tolerations", "has %d entries; at most %d", len(k.Tolerations), MaxTolerations)
	}
	for i, t := range k.Tolerations {
		field := fmt.Sprintf(".kubernetes.tolerations[%d]", i)
		switch {
		case t.Key != "" && !qualifiedName.MatchString(t.Key):
			add(field+".key", "is not a taint key")
		case !slices.Contains([]string{"", "Equal", "Exists"}, t.Operator):
			add(field+".operator", "must be Equal or Exists; got %q", clipText(t.Operator))
		case t.Operator == "Exists" && t.Value != "":
			add(field+".value", "must be empty with operator Exists")
		case t.Key == "" && t.Operator != "Exists":
			add(field+".key", "an empty key needs operator Exists")
		case !labelValue.MatchString(t.Value):
			add(field+".value", "is not a taint value")
		case !slices.Contains([]string{"", "NoSchedule", "PreferNoSchedule", "NoExecute"}, t.Effect):
			add(field+".effect", "must be NoSchedule, PreferNoSchedule or NoExecute; got %q", clipText(t.Effect))
		case t.TolerationSeconds != nil && t.Effect != "NoExecute":
			add(field+".toleration_seconds", "only a NoExecute toleration takes it")
		}
	}
	if k.ServiceAccount != "" && (len(k.ServiceAccount) > 253 || !dnsSubdomain.MatchString(k.ServiceAccount)) {
		add(".kubernetes.service_account", "must be a service account name (lowercase DNS subdomain); got %q",
			clipText(k.ServiceAccount))
	}
	if k.Namespace != "" && !dnsLabel.MatchString(k.Namespace) {
		add(".kubernetes.namespace", "must be a namespace name (1-63 of [a-z0-9-]); got %q", clipText(k.Namespace))
	}
	return errs
}
