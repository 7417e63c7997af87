// Package obs holds what Capstan's services are watched with, apart from
// the store: the payload size histogram, and OpenTelemetry tracing (set up
// from the environment, carried through asynq task headers). Package
// gauges holds the collectors over Postgres and asynq.
package obs

import "github.com/prometheus/client_golang/prometheus"

// Payload kinds, the values of capstan_payload_size_bytes's kind label.
const (
	// KindSpec is a submitted workflow spec, as JSON.
	KindSpec = "spec"
	// KindOutputs is a task's outputs as an executor reports them.
	KindOutputs = "outputs"
	// KindLogChunk is one chunk of an attempt's log an executor ships.
	KindLogChunk = "log_chunk"
	// KindQueuePayload is an asynq task's payload.
	KindQueuePayload = "queue_payload"
)

// PayloadSizes is capstan_payload_size_bytes{kind}: the serialized size of
// what Capstan stores or carries (the Flyte executor's
// taskaction.crd.size_bytes, which finds the objects whose size slows the
// system). A nil *PayloadSizes observes nothing.
type PayloadSizes struct {
	h *prometheus.HistogramVec
}

// NewPayloadSizes registers capstan_payload_size_bytes in reg (buckets 64 B
// to 8 MiB) with every kind's series at zero. Errors: reg refuses it (a
// duplicate).
func NewPayloadSizes(reg prometheus.Registerer) (*PayloadSizes, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "capstan_payload_size_bytes",
		Help:    "Serialized size in bytes of specs, outputs, log chunks and queue payloads, by kind.",
		Buckets: prometheus.ExponentialBuckets(64, 4, 10)}, []string{"kind"})
	if err := reg.Register(h); err != nil {
		return nil, err
	}
	for _, k := range []string{KindSpec, KindOutputs, KindLogChunk, KindQueuePayload} {
		h.WithLabelValues(k)
	}
	return &PayloadSizes{h: h}, nil
}

// Observe records one payload of n bytes of kind.
func (p *PayloadSizes) Observe(kind string, n int) {
	if p == nil {
		return
	}
	p.h.WithLabelValues(kind).Observe(float64(n))
}
