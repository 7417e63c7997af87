package server

import (
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/problem"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"
)

// The api limits requests twice. Before authentication, per client address
// (ipRateLimit): a request without a token, or with one the api does not
// hold in memory, pays its address's bucket before the token is looked
// up, so that random secrets cost their sender its own budget, never a
// fresh bucket or a statement each. After authentication, per token id
// (authenticator.authenticate): a token pays its own bucket wherever it
// comes from.

// bucketsSize bounds the keys a buckets remembers.
const bucketsSize = 100_000

// buckets is a token bucket (golang.org/x/time/rate) per key, a client
// address or a token id, for at most bucketsSize keys: the least recently
// used is forgotten first, and comes back with a full bucket, as it would
// have refilled while idle.
type buckets struct {
	limit rate.Limit
	burst int
	now   func() time.Time
	mu    sync.Mutex // makes get-or-add one step
	by    *lru.Cache[string, *rate.Limiter]
}

// newBuckets fills at perSecond up to burst (both positive).
func newBuckets(perSecond float64, burst int) *buckets {
	by, _ := lru.New[string, *rate.Limiter](bucketsSize) // only a non-positive size fails
	return &buckets{limit: rate.Limit(perSecond), burst: burst, now: time.Now, by: by}
}

// take charges one request to key. When its bucket is empty it charges
// nothing and returns how long until it holds one request again.
func (b *buckets) take(key string) (ok bool, wait time.Duration) {
	b.mu.Lock()
	l, found := b.by.Get(key)
	if !found {
		l = rate.NewLimiter(b.limit, b.burst)
		b.by.Add(key, l)
	}
	b.mu.Unlock()
	now := b.now()
	r := l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// rateLimitError is the answer of an empty bucket: 429, retry after wait.
type rateLimitError struct {
	wait   time.Duration
	detail string
}

func (e *rateLimitError) Error() string { return e.detail }

// tooManyRequests is the 429 problem+json of an empty bucket, or a full
// stream count, with Retry-After: wait in whole seconds, at least 1.
func tooManyRequests(c echo.Context, wait time.Duration, detail string) error {
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	return problem.New(http.StatusTooManyRequests, problem.CodeRateLimited, detail)
}

// ipRateLimit charges each request but the probes, and those whose token
// known reports the api holds in memory (they pay the token's bucket
// instead), to its client address's bucket in b (addressKey): past it,
// 429. The address is echo's RealIP, which the server's IPExtractor
// decides (ipExtractor).
func ipRateLimit(b *buckets, known func(*http.Request) bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if isProbe(c.Request().URL.Path) || known(c.Request()) {
				return next(c)
			}
			if ok, wait := b.take(addressKey(c.RealIP())); !ok {
				return tooManyRequests(c, wait, "too many requests from this address without a known token")
			}
			return next(c)
		}
	}
}

// addressKey is the bucket of a client address: an IPv4 address itself,
// an IPv6 one by its /64, the least a host is given and may fill with
// addresses at will.
func addressKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil || a.Is4() || a.Is4In6() {
		return ip
	}
	p, err := a.Prefix(64)
	if err != nil {
		return ip
	}
	return p.String()
}

// ipExtractor is how the server tells a request's client address (echo's
// IPExtractor, read by RealIP). With no trusted proxy: the connection's
// peer, X-Forwarded-For ignored, as any client can write it. With some:
// when the peer is one of them, the rightmost X-Forwarded-For entry that
// is not (echo.ExtractIPFromXFFHeader trusting those ranges alone, not
// loopback, link-local or private ones as it does by default), else the
// peer.
func ipExtractor(proxies []netip.Prefix) echo.IPExtractor {
	if len(proxies) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range proxies {
		p = p.Masked()
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(),
			Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// isProbe reports whether path is a health probe, never rate limited.
func isProbe(path string) bool { return path == "/healthz" || path == "/readyz" }

// accessLog writes one line per request ("request"): method, path, status,
// latency, bytes out, the request id and, once authenticated, the token's
// id and role — never the secret or the query (it may name a cursor).
func accessLog(log *slog.Logger) echo.MiddlewareFunc {
	return middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogMethod: true, LogURIPath: true, LogStatus: true, LogLatency: true, LogRequestID: true,
		LogResponseSize: true, HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			attrs := []any{"method", v.Method, "path", v.URIPath, "status", v.Status,
				"latency_ms", float64(v.Latency.Microseconds()) / 1000, "bytes_out", v.ResponseSize,
				"request_id", v.RequestID}
			if p, ok := principalFrom(c.Request().Context()); ok {
				attrs = append(attrs, "token", p.tokenID, "role", p.role)
			}
			log.Info("request", attrs...)
			return nil
		},
	})
}

// writeDeadline bounds writing the answer of every request but a stream
// (logs?follow=true, GET .../events, or Accept: text/event-stream), which
// ends on its own terms (Config.LogFollowMax): the listener has no write
// timeout so that streams can last. A publication (POST .../events) is
// bounded.
func writeDeadline(d time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			events := req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/events")
			stream := req.URL.Query().Get("follow") == "true" || events ||
				strings.Contains(req.Header.Get("Accept"), "text/event-stream")
			if !stream {
				_ = http.NewResponseController(c.Response().Writer).SetWriteDeadline(time.Now().Add(d))
			}
			return next(c)
		}
	}
}
