package svc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// HealthcheckArg is the argument that makes a service binary probe its own
// readiness and exit: the container healthcheck (the images carry no curl).
const HealthcheckArg = "healthcheck"

// healthcheckTimeout bounds one probe.
const healthcheckTimeout = 5 * time.Second

// Healthcheck returns when args are empty. When they are [HealthcheckArg]
// it probes the service listening on addr (Probe) and exits 0 when it is
// ready, else 1 with the cause on stderr; any other argument exits 2
// naming it.
func Healthcheck(args []string, addr string) {
	switch {
	case len(args) == 0:
		return
	case len(args) == 1 && args[0] == HealthcheckArg:
		os.Exit(ProbeExit(addr, os.Stderr))
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q (want: %s, or no argument to serve)\n", args[0], HealthcheckArg)
		os.Exit(2)
	}
}

// ProbeExit probes addr and returns the exit status of a healthcheck: 0
// ready, 1 not (the cause written to w).
func ProbeExit(addr string, w io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), healthcheckTimeout)
	defer cancel()
	if err := Probe(ctx, addr); err != nil {
		fmt.Fprintln(w, "not ready:", err)
		return 1
	}
	return 0
}

// Probe asks GET http://addr/readyz and returns nil on a 200. addr is a
// listen address (host:port): an empty or unspecified host (":8080",
// "0.0.0.0:8080", "[::]:8080") is asked on 127.0.0.1. Errors: addr without
// a fixed port, the request's failure, or a status other than 200 (with the
// start of its body).
func Probe(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if port == "" || port == "0" {
		return fmt.Errorf("listen address %q has no fixed port to probe", addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET /readyz: %s: %s", resp.Status, body)
	}
	return nil
}
