package domain

import "fmt"

// NetworkNone is Step.Network for tasks that run with no network: each
// attempt's processes get a network namespace of their own with only a
// loopback interface (a container, `--network none`), so nothing outside
// the attempt is reachable, the host's loopback services included.
const NetworkNone = "none"

// validateNetwork checks a task step's network: absent, or NetworkNone for
// a plugin that runs a process (http sends its request from the executor
// and needs the network).
func (s Step) validateNetwork() []FieldError {
	switch {
	case s.Network == "":
		return nil
	case s.Network != NetworkNone:
		return []FieldError{{Field: ".network", Message: fmt.Sprintf("must be %q or absent; got %q", NetworkNone,
			clipText(s.Network))}}
	case s.Plugin == PluginHTTP:
		return []FieldError{{Field: ".network", Message: "an http step sends its request over the network: it cannot be none"}}
	}
	return nil
}
