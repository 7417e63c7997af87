package domain

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Plugins the executor ships (Flyte's plugin registry: a task step names
// one, the executor looks it up by name).
const (
	// PluginShell runs Step.Command with /bin/sh -c, or Step.Args directly,
	// in its own process group.
	PluginShell = "shell"
	// PluginHTTP sends Step.HTTP's request.
	PluginHTTP = "http"
	// PluginContainer runs Step.Container with docker or podman. Only the
	// executors that found a working runtime run it: they advertise the
	// worker label PluginLabel(PluginContainer)=true.
	PluginContainer = "container"
	// PluginKubernetes runs Step.Kubernetes as one Kubernetes Pod per
	// attempt. Only the executors configured for a cluster run it: they
	// advertise the worker label PluginLabel(PluginKubernetes)=true.
	PluginKubernetes = "kubernetes"
	// PluginNoop starts no process: the executor reports the attempt RUNNING
	// and then SUCCEEDED at once. It needs no command (one given is
	// ignored); it tests a workflow's shape and measures the control plane.
	PluginNoop = "noop"
)

// KnownPlugins lists the plugin names a spec may use.
var KnownPlugins = []string{PluginShell, PluginHTTP, PluginContainer, PluginKubernetes, PluginNoop}

// OptionalPlugins are the plugins only some executors run: a task of one is
// placed only on a worker labelled PluginLabel(plugin)=true. The others run
// on every executor.
var OptionalPlugins = []string{PluginContainer, PluginKubernetes}

// PluginLabel is the worker label an executor sets to "true" when it runs
// plugin, e.g. "plugin.container".
func PluginLabel(plugin string) string { return "plugin." + plugin }

// RunsPlugin reports whether the worker runs plugin: every worker runs a
// plugin not in OptionalPlugins; an optional one only a worker labelled
// PluginLabel(plugin)="true" runs (its executor found what it needs, e.g. a
// container runtime).
func (w WorkerView) RunsPlugin(plugin string) bool {
	return !slices.Contains(OptionalPlugins, plugin) || w.Labels[PluginLabel(plugin)] == "true"
}

// PluginOffered reports whether any of the workers whose labels are given
// runs plugin (RunsPlugin): while one does, placement may still find the
// plugin's task a worker; when none does, a task its executor could not run
// (CodePluginUnavailable) fails for good (Flyte: "no plugin is found for
// the TaskType" fails the action).
func PluginOffered(plugin string, labels []map[string]string) bool {
	for _, l := range labels {
		if (WorkerView{Labels: l}).RunsPlugin(plugin) {
			return true
		}
	}
	return false
}

// DefaultKillGrace is how long an aborted process has between SIGTERM and
// SIGKILL when its step sets no kill_grace.
const DefaultKillGrace = 10 * time.Second

// Limits of the plugin fields.
const (
	MaxArgs          = 1024
	MaxHTTPBodyBytes = 1 << 20
	MaxHeaders       = 64
	MaxURLBytes      = 8 << 10
	MaxWaitCodes     = 64
)

// HTTPSpec is the http plugin's request: Method (default GET) to URL with
// Headers and Body. A status in SuccessCodes (default any 2xx) succeeds; one
// in WaitCodes means the target is not ready yet (the step waits, KubeVela's
// wait for healthy); a 5xx or a transport error is a retryable user
// failure; any other status fails without retry.
type HTTPSpec struct {
	URL          string            `json:"url"`
	Method       string            `json:"method,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
	Body         string            `json:"body,omitempty"`
	SuccessCodes []int             `json:"success_codes,omitempty"`
	WaitCodes    []int             `json:"wait_codes,omitempty"`
}

// Waits reports whether status means the target is not ready yet: it is in
// WaitCodes (and so, by validation, no success code).
func (h HTTPSpec) Waits(status int) bool { return slices.Contains(h.WaitCodes, status) }

// Succeeded reports whether status counts as success.
func (h HTTPSpec) Succeeded(status int) bool {
	if len(h.SuccessCodes) == 0 {
		return status >= 200 && status < 300
	}
	return slices.Contains(h.SuccessCodes, status)
}

// MethodOrDefault returns Method, default GET.
func (h HTTPSpec) MethodOrDefault() string {
	if h.Method == "" {
		return http.MethodGet
	}
	return h.Method
}

// ContainerSpec is the container plugin's image, argv (the image's
// entrypoint when empty) and environment.
type ContainerSpec struct {
	Image string            `json:"image"`
	Args  []string          `json:"args,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
}

// PluginSpec is what an attempt's plugin runs: the plugin and its fields,
// as the API hands them to the executor. Its JSON is canonical (struct
// fields in order, map keys sorted), so it is also a cache key's part.
type PluginSpec struct {
	Plugin     string            `json:"plugin"`
	Command    string            `json:"command,omitempty"`
	Args       []string          `json:"args,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	HTTP       *HTTPSpec         `json:"http,omitempty"`
	Container  *ContainerSpec    `json:"container,omitempty"`
	Kubernetes *KubernetesSpec   `json:"kubernetes,omitempty"`
	// WaitExitCode is the shell plugin's "not ready yet" exit status.
	WaitExitCode *int `json:"wait_exit_code,omitempty"`
}

// PluginSpec returns the step's plugin and its fields.
func (s Step) PluginSpec() PluginSpec {
	return PluginSpec{Plugin: s.Plugin, Command: s.Command, Args: s.Args, Env: s.Env, HTTP: s.HTTP,
		Container: s.Container, Kubernetes: s.Kubernetes, WaitExitCode: s.WaitExitCode}
}

// Waits reports whether the plugin may answer that its target is not ready
// (http wait_codes, a shell wait_exit_code).
func (p PluginSpec) Waits() bool {
	return p.WaitExitCode != nil || p.HTTP != nil && len(p.HTTP.WaitCodes) > 0
}

// KillGraceDuration parses KillGrace, default DefaultKillGrace.
func (s Step) KillGraceDuration() time.Duration {
	if d, err := time.ParseDuration(s.KillGrace); err == nil && d >= 0 {
		return d
	}
	return DefaultKillGrace
}

// Validate checks the plugin's name and fields; each problem names its
// field relative to the step (".command", ".http.url"). The api checks a
// spec with it, and the executor checks each attempt with it again, in case
// the two run different versions (Flyte's validation before execution).
func (p PluginSpec) Validate() []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	if !slices.Contains(KnownPlugins, p.Plugin) {
		add(".plugin", "unknown plugin %q; known: %s", p.Plugin, strings.Join(KnownPlugins, ", "))
		return errs
	}
	fields := map[string]bool{".command": p.Command != "", ".args": len(p.Args) > 0, ".http": p.HTTP != nil,
		".container": p.Container != nil, ".kubernetes": p.Kubernetes != nil, ".wait_exit_code": p.WaitExitCode != nil}
	allowed := map[string][]string{PluginShell: {".command", ".args", ".wait_exit_code"}, PluginHTTP: {".http"},
		PluginContainer: {".container"}, PluginKubernetes: {".kubernetes"}, PluginNoop: {".command"}}[p.Plugin]
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		if fields[f] && !slices.Contains(allowed, f) {
			add(f, "the %s plugin does not take it", p.Plugin)
		}
	}
	switch p.Plugin {
	case PluginShell:
		errs = append(errs, p.validateShell()...)
	case PluginHTTP:
		errs = append(errs, p.HTTP.validate()...)
	case PluginContainer:
		errs = append(errs, p.Container.validate()...)
	case PluginKubernetes:
		errs = append(errs, p.Kubernetes.validate()...)
	}
	return errs
}

func (p PluginSpec) validateShell() []FieldError {
	if c := p.WaitExitCode; c != nil && (*c < 1 || *c > 255) {
		return []FieldError{{".wait_exit_code", fmt.Sprintf("must be an exit status from 1 to 255; got %d", *c)}}
	}
	switch {
	case p.Command != "" && len(p.Args) > 0:
		return []FieldError{{".args", "give command (run by /bin/sh -c) or args (an argv), not both"}}
	case len(p.Args) > 0:
		return validateArgv(".args", p.Args, true)
	case strings.TrimSpace(p.Command) == "":
		return []FieldError{{".command", "is required for the shell plugin (or args)"}}
	}
	return nil
}

// validateArgv checks an argv: at most MaxArgs entries, MaxCommandBytes in
// all, no NUL, and (when first matters) a non-empty program.
func validateArgv(field string, argv []string, first bool) []FieldError {
	size := 0
	for i, a := range argv {
		size += len(a)
		if strings.ContainsRune(a, 0) {
			return []FieldError{{fmt.Sprintf("%s[%d]", field, i), "must not contain NUL"}}
		}
	}
	switch {
	case len(argv) > MaxArgs:
		return []FieldError{{field, fmt.Sprintf("has %d entries; at most %d", len(argv), MaxArgs)}}
	case size > MaxCommandBytes:
		return []FieldError{{field, fmt.Sprintf("is %d bytes; at most %d", size, MaxCommandBytes)}}
	case first && strings.TrimSpace(argv[0]) == "":
		return []FieldError{{field + "[0]", "the program must not be empty"}}
	}
	return nil
}

func (h *HTTPSpec) validate() []FieldError {
	if h == nil {
		return []FieldError{{".http", "the http plugin needs http: {url, method, headers, body, success_codes, wait_codes}"}}
	}
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		len(h.URL) > MaxURLBytes {
		add(".http.url", "must be an absolute http or https URL of at most %d bytes; got %q", MaxURLBytes, clipText(h.URL))
	}
	if h.Method != "" && !httpToken(h.Method) {
		add(".http.method", "must be an HTTP method such as GET or POST; got %q", clipText(h.Method))
	}
	if len(h.Headers) > MaxHeaders {
		add(".http.headers", "has %d headers; at most %d", len(h.Headers), MaxHeaders)
	}
	for _, k := range slices.Sorted(maps.Keys(h.Headers)) {
		if !httpToken(k) || strings.ContainsAny(h.Headers[k], "\r\n\x00") {
			add(".http.headers."+k, "is not a valid header name and value")
		}
	}
	if len(h.Body) > MaxHTTPBodyBytes {
		add(".http.body", "is %d bytes; at most %d", len(h.Body), MaxHTTPBodyBytes)
	}
	for i, c := range h.SuccessCodes {
		if c < 100 || c > 599 {
			add(fmt.Sprintf(".http.success_codes[%d]", i), "must be an HTTP status from 100 to 599; got %d", c)
		}
	}
	if len(h.WaitCodes) > MaxWaitCodes {
		add(".http.wait_codes", "has %d codes; at most %d", len(h.WaitCodes), MaxWaitCodes)
	}
	for i, c := range h.WaitCodes {
		switch {
		case c < 100 || c > 599:
			add(fmt.Sprintf(".http.wait_codes[%d]", i), "must be an HTTP status from 100 to 599; got %d", c)
		case h.Succeeded(c):
			add(fmt.Sprintf(".http.wait_codes[%d]", i), "%d is a success code; a wait code means not ready yet", c)
		}
	}
	return errs
}

// httpToken reports whether s is an HTTP token (RFC 9110), as a method or a
// header name must be.
func httpToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	return true
}

func (c *ContainerSpec) validate() []FieldError {
	if c == nil {
		return []FieldError{{".container", "the container plugin needs container: {image, args, env}"}}
	}
	var errs []FieldError
	if strings.TrimSpace(c.Image) == "" || strings.ContainsAny(c.Image, " \t\r\n\x00") || strings.HasPrefix(c.Image, "-") {
		errs = append(errs, FieldError{".container.image", fmt.Sprintf("must be an image reference such as \"alpine:3\"; got %q", clipText(c.Image))})
	}
	errs = append(errs, validateArgv(".container.args", c.Args, false)...)
	for _, e := range (Step{Env: c.Env}).validateEnv() {
		errs = append(errs, FieldError{".container" + e.Field, e.Message})
	}
	return errs
}

// clipText bounds a value quoted in an error message.
func clipText(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
