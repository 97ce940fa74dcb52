// Package metrics holds computerd's Prometheus collectors on a dedicated
// registry (never the global one), served on --metrics-listen.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"computerd/core"
	"computerd/fsstore"
)

// Metrics are the collectors every part of computerd reports to.
type Metrics struct {
	Registry *prometheus.Registry

	// Requests counts authenticated API calls by route pattern, method
	// and status code; Unauthenticated the calls refused for a missing or
	// wrong token, without labels (see api.Server).
	Requests        *prometheus.CounterVec
	Unauthenticated prometheus.Counter
	// Errors counts failed authenticated calls by error code: the
	// refusals for a tenant's quota (quota_exceeded) and for a full disk
	// (no_space) apart from the others that share their status.
	Errors *prometheus.CounterVec
	// Latency observes API call durations by route pattern and method.
	Latency *prometheus.HistogramVec
	// Revisions counts committed revisions by source (api, exec, mount, ...).
	Revisions *prometheus.CounterVec

	// Sync: chunk bytes and chunks moved ("pull": sent by a home or
	// received by an executor; "push": the other way), pushes by outcome,
	// pushes waiting on an executor, and latency by operation.
	SyncBytes     *prometheus.CounterVec
	SyncChunks    *prometheus.CounterVec
	Pushes        *prometheus.CounterVec
	PendingPushes prometheus.Gauge
	SyncLatency   *prometheus.HistogramVec

	// Execs: count by outcome (exited, killed, timeout, failed,
	// interrupted, pending), start latency (request to command start) and
	// duration, containers running now, and containers used by kind (warm:
	// made ahead of time; new: made for the exec).
	Execs          *prometheus.CounterVec
	ExecStart      prometheus.Histogram
	ExecDuration   prometheus.Histogram
	ExecsRunning   prometheus.Gauge
	ExecContainers *prometheus.CounterVec
	// ExecWorkspaces counts execs' /workspace overlays by kind: new
	// (mounted for the exec) or shelved (an untouched one of an earlier
	// exec on the same revision, overlay.Shelf).
	ExecWorkspaces *prometheus.CounterVec
	// ExecShelved is how many such overlays are on the shelf now.
	ExecShelved prometheus.Gauge
	// ExecsRefused counts execs refused before they ran, by reason
	// (ceiling: asked above a --exec-max-* ceiling; busy: at the running
	// limit); ExecsTruncated those whose output reached the cap.
	ExecsRefused   *prometheus.CounterVec
	ExecsTruncated prometheus.Counter

	// Retention (serve's --retention): passes by outcome (ok, error), the
	// revisions they pruned, the chunks they deleted and those chunks'
	// content bytes, and how long a pass took.
	GCRuns      *prometheus.CounterVec
	GCRevisions prometheus.Counter
	GCChunks    prometheus.Counter
	GCBytes     prometheus.Counter
	GCDuration  prometheus.Histogram
}

// New makes the collectors and registers them, with Go and process collectors,
// on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "computerd_http_requests_total",
			Help: "Authenticated API requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		Unauthenticated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "computerd_http_unauthenticated_total",
			Help: "API requests refused for a missing, unknown or revoked token (by no route or method: they add no series).",
		}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "computerd_http_request_duration_seconds",
			Help:    "Authenticated API request latency by route pattern and method (until the body is written).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}, []string{"route", "method"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "computerd_http_errors_total",
			Help: "Authenticated API requests that failed, by error code (quota_exceeded, no_space, busy, ...; codes outside the API's table count as internal).",
		}, []string{"code"}),
		Revisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "computerd_revisions_committed_total",
			Help: "Revisions committed by this process, by source.",
		}, []string{"source"}),
	}
	m.SyncBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computerd_sync_bytes_total", Help: "Chunk bytes moved by sync, by direction (pull, push).",
	}, []string{"direction"})
	m.SyncChunks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computerd_sync_chunks_total", Help: "Chunks moved by sync, by direction (pull, push).",
	}, []string{"direction"})
	m.Pushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computerd_sync_pushes_total", Help: "Pushes by outcome (applied, duplicate, conflict, malformed, error, retry).",
	}, []string{"outcome"})
	m.PendingPushes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "computerd_sync_pending_pushes", Help: "Changesets an executor holds until the home takes them.",
	})
	m.SyncLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "computerd_sync_seconds", Help: "Sync latency by operation (pull, fetch, push).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
	}, []string{"op"})
	m.Execs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computerd_execs_total", Help: "Execs ended, by outcome.",
	}, []string{"outcome"})
	m.ExecStart = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "computerd_exec_start_seconds", Help: "From an exec request to its command starting (mount and container).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	m.ExecDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "computerd_exec_duration_seconds", Help: "Exec durations, request to recorded result.",
		Buckets: prometheus.ExponentialBuckets(0.01, 3, 12),
	})
	m.ExecsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computerd_execs_refused_total", Help: "Execs refused before they ran, by reason (ceiling, busy).",
	}, []string{"reason"})
	m.ExecsTruncated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "computerd_execs_output_truncated_total", Help: "Execs whose stored output reached the per-exec cap.",
	})
	m.ExecsRunning = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "computerd_execs_running", Help: "Execs (containers) running now.",
	})
	m.ExecContainers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computerd_exec_containers_total", Help: "Containers execs ran in, by kind: warm (made ahead of time) or new (made for the exec).",
	}, []string{"kind"})
	m.ExecWorkspaces = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computerd_exec_workspaces_total", Help: "Overlays execs saw /workspace through, by kind: new (mounted for the exec) or shelved (kept from an earlier exec on the same revision that changed nothing).",
	}, []string{"kind"})
	m.ExecShelved = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "computerd_exec_workspaces_shelved", Help: "Overlays of execs that changed nothing, kept mounted for the next exec on the same revision.",
	})
	m.GCRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computerd_gc_runs_total", Help: "Retention passes (prune, then GC), by outcome (ok, error).",
	}, []string{"outcome"})
	m.GCRevisions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "computerd_gc_revisions_pruned_total", Help: "Revisions the retention policy pruned.",
	})
	m.GCChunks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "computerd_gc_chunks_collected_total", Help: "Chunks GC deleted, referenced by no retained revision and held by no upload.",
	})
	m.GCBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "computerd_gc_bytes_reclaimed_total", Help: "Content bytes of the chunks GC deleted.",
	})
	m.GCDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "computerd_gc_duration_seconds", Help: "Duration of a retention pass (prune, GC, vacuum).",
		Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
	})
	m.Registry.MustRegister(m.GCRuns, m.GCRevisions, m.GCChunks, m.GCBytes, m.GCDuration)
	m.Registry.MustRegister(m.Execs, m.ExecStart, m.ExecDuration, m.ExecsRunning, m.ExecContainers, m.ExecWorkspaces, m.ExecShelved, m.ExecsRefused, m.ExecsTruncated)
	m.Registry.MustRegister(m.SyncBytes, m.SyncChunks, m.Pushes, m.PendingPushes, m.SyncLatency)
	m.Registry.MustRegister(m.Requests, m.Errors, m.Unauthenticated, m.Latency, m.Revisions,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Registry.MustRegister(buildInfo())
	return m
}

// Committed records one revision.
func (m *Metrics) Committed(r core.Revision) {
	if m != nil && r.Rev > 0 {
		m.Revisions.WithLabelValues(string(r.Source)).Inc()
	}
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// WatchStore adds gauges read from the store's Stats at scrape time (a few
// index-only counts and two file sizes).
func (m *Metrics) WatchStore(s *fsstore.Store) {
	m.Registry.MustRegister(&storeCollector{store: s})
}

var (
	workspacesDesc = prometheus.NewDesc("computerd_workspaces", "Live workspaces, every tenant.", nil, nil)
	revisionsDesc  = prometheus.NewDesc("computerd_revisions_retained", "Revisions retained in the store.", nil, nil)
	chunksDesc     = prometheus.NewDesc("computerd_store_chunks", "Unique content chunks in the store.", nil, nil)
	bytesDesc      = prometheus.NewDesc("computerd_store_bytes", "Store size: logical (unique content) and physical (database files on disk).", []string{"kind"}, nil)
	diskDesc       = prometheus.NewDesc("computerd_data_disk_bytes", "The file system of the data directory: its size, and what is free for computerd (what the store's writes may still take).", []string{"kind"}, nil)
)

type storeCollector struct {
	store *fsstore.Store
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- workspacesDesc
	ch <- revisionsDesc
	ch <- chunksDesc
	ch <- bytesDesc
	ch <- diskDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	st, err := c.store.Stats(ctx)
	cancel()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(workspacesDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(workspacesDesc, prometheus.GaugeValue, float64(st.Workspaces))
	ch <- prometheus.MustNewConstMetric(revisionsDesc, prometheus.GaugeValue, float64(st.Revisions))
	ch <- prometheus.MustNewConstMetric(chunksDesc, prometheus.GaugeValue, float64(st.Chunks))
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.GaugeValue, float64(st.LogicalBytes), "logical")
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.GaugeValue, float64(st.PhysicalBytes), "physical")
	free, size, err := c.store.DiskSpace()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(diskDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(diskDesc, prometheus.GaugeValue, float64(size), "size")
	ch <- prometheus.MustNewConstMetric(diskDesc, prometheus.GaugeValue, float64(free), "free")
}
