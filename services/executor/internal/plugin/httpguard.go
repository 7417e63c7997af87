package plugin

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// HTTPAllow lists the targets the http plugin reaches although they are
// loopback, link-local (169.254.0.0/16 — cloud metadata endpoints —,
// fe80::/10) or unspecified addresses, which it refuses otherwise: address
// ranges, and host names whose every address it then reaches. Its zero
// value allows none.
type HTTPAllow struct {
	prefixes []netip.Prefix
	hosts    []string // lower case
}

// ParseHTTPAllow parses a comma-separated list of CIDRs ("127.0.0.0/8"),
// addresses ("::1") and host names ("metadata.internal"); blanks around
// items are ignored. Errors: an item that is none of them.
func ParseHTTPAllow(list string) (HTTPAllow, error) {
	var a HTTPAllow
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		switch p, pErr := netip.ParsePrefix(item); {
		case item == "":
		case pErr == nil:
			a.prefixes = append(a.prefixes, p.Masked())
		case strings.Contains(item, "/"):
			return HTTPAllow{}, fmt.Errorf("http allow list: %q is not a CIDR: %w", item, pErr)
		default:
			if ip, err := netip.ParseAddr(item); err == nil {
				a.prefixes = append(a.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			if !validHost(item) {
				return HTTPAllow{}, fmt.Errorf("http allow list: %q is not a CIDR, an address or a host name", item)
			}
			a.hosts = append(a.hosts, strings.ToLower(item))
		}
	}
	return a, nil
}

// validHost reports whether s is a DNS host name: dot-separated labels of
// letters, digits and dashes.
func validHost(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// allowsHost reports whether host (a URL's host, without its port) is a
// host name of the list.
func (a HTTPAllow) allowsHost(host string) bool {
	for _, h := range a.hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// allowsIP reports whether ip is in a range of the list.
func (a HTTPAllow) allowsIP(ip netip.Addr) bool {
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// TargetRefusedError: the http plugin refused to connect to Addr, the
// resolved address of Host, which is of a Kind it does not reach (HTTPAllow).
type TargetRefusedError struct {
	Host string
	Addr netip.AddrPort
	Kind string
}

func (e *TargetRefusedError) Error() string {
	target := e.Addr.String()
	if e.Host != "" && e.Host != e.Addr.Addr().String() {
		target = e.Host + " (" + target + ")"
	}
	return fmt.Sprintf("refused to connect to %s: a %s address, which the executor's CAPSTAN_HTTP_ALLOW does not list",
		target, e.Kind)
}

// refusedKind names why ip is refused ("" when it is not): loopback,
// link-local or unspecified (an IPv4-mapped IPv6 address as its IPv4).
func refusedKind(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsUnspecified():
		return "unspecified"
	}
	return ""
}

// guardedDialer dials the http plugin's connections: to a host the allow
// list names, as asked; to any other, it checks each address the name
// resolved to when the socket connects (net.Dialer.Control), so that a
// name that resolves to a refused address — however its DNS answers
// change between lookups — is refused too.
type guardedDialer struct {
	allow    HTTPAllow
	resolver *net.Resolver
}

// DialContext dials addr ("host:port") on network.
func (g guardedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Resolver: g.resolver}
	if !g.allow.allowsHost(host) {
		d.Control = func(_, address string, _ syscall.RawConn) error { return g.check(host, address) }
	}
	return d.DialContext(ctx, network, addr)
}

// check returns a *TargetRefusedError when address (the resolved "ip:port"
// of host) is refused.
func (g guardedDialer) check(host, address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", address, err)
	}
	ip := ap.Addr().Unmap()
	if kind := refusedKind(ip); kind != "" && !g.allow.allowsIP(ip) {
		return &TargetRefusedError{Host: host, Addr: netip.AddrPortFrom(ip, ap.Port()), Kind: kind}
	}
	return nil
}
