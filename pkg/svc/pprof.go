package svc

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// StartPprof serves Go's profiler (net/http/pprof, under /debug/pprof/) on
// PprofAddr in the background when it is set; it is off by default. It
// exposes the process's internals: bind it to loopback, for profiling only.
func (c Common) StartPprof(log *slog.Logger) {
	if c.PprofAddr == "" {
		return
	}
	mux := PprofHandler()
	ln, err := net.Listen("tcp", c.PprofAddr)
	if err != nil {
		log.Warn("pprof not served", "addr", c.PprofAddr, "err", err)
		return
	}
	log.Info("serving pprof", "addr", ln.Addr().String())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
}

// PprofHandler serves Go's profiler (net/http/pprof) under /debug/pprof/:
// the index, cmdline, profile, symbol, trace and the named profiles. Mount
// it only behind an operator's authentication.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
