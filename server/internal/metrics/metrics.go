// Package metrics defines sandboxd's Prometheus metrics. Each server owns a
// private registry (tests run several servers in one process); /metrics
// serves it.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Transports, the values of the "transport" label.
const (
	TransportWS  = "ws"
	TransportMCP = "mcp"
)

// Stats is what the session manager reports at scrape time.
type Stats struct {
	SessionsByState map[string]int
	PoolSize        int // warm containers ready to become sessions
	PoolTarget      int // what the pools aim at now (between their min and max)
	// EgressDenials counts the connections the sessions' egress proxies
	// refused, by way (http, connect, tls, limit).
	EgressDenials map[string]uint64
}

// Metrics is the set of sandboxd's metrics.
type Metrics struct {
	Registry *prometheus.Registry

	CallDuration    *prometheus.HistogramVec // tool, transport
	Errors          *prometheus.CounterVec   // code, transport
	Requests        *prometheus.CounterVec   // method, transport
	WSConnections   prometheus.Gauge
	SlowDisconnects prometheus.Counter
	StreamGaps      prometheus.Counter
	MCPSessions     prometheus.Gauge
}

// New registers the metrics; stats (may be nil) is called at each scrape.
func New(stats func() Stats) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		CallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandboxd_tool_call_duration_seconds",
			Help: "Duration of tool calls as the API saw them, by tool and transport.",
			// 0.5 ms .. ~65 s: a no-op call is sub-millisecond, a build minutes.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"tool", "transport"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_errors_total",
			Help: "Errors returned to clients, by error code (kind) and transport.",
		}, []string{"code", "transport"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_requests_total",
			Help: "API requests, by method and transport.",
		}, []string{"method", "transport"}),
		WSConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandboxd_ws_connections",
			Help: "Open WebSocket connections.",
		}),
		SlowDisconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandboxd_ws_slow_client_disconnects_total",
			Help: "WebSocket clients disconnected because they did not read fast enough.",
		}),
		StreamGaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandboxd_ws_stream_gaps_total",
			Help: "Ranges of session output withheld from a WebSocket client that read more slowly than the session printed (stream.gap notices).",
		}),
		MCPSessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandboxd_mcp_sessions",
			Help: "Open MCP sessions.",
		}),
	}
	reg.MustRegister(m.CallDuration, m.Errors, m.Requests, m.WSConnections, m.SlowDisconnects, m.StreamGaps, m.MCPSessions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if stats != nil {
		reg.MustRegister(&statsCollector{stats: stats})
	}
	return m
}

// ObserveCall records one tool call.
func (m *Metrics) ObserveCall(tool, transport string, d time.Duration) {
	m.CallDuration.WithLabelValues(tool, transport).Observe(d.Seconds())
}

// Error counts one error returned to a client.
func (m *Metrics) Error(code, transport string) {
	m.Errors.WithLabelValues(code, transport).Inc()
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

var (
	sessionsDesc = prometheus.NewDesc("sandboxd_sessions", "Sessions by state.", []string{"state"}, nil)
	poolDesc     = prometheus.NewDesc("sandboxd_pool_size", "Warm containers ready to become sessions.", nil, nil)
	targetDesc   = prometheus.NewDesc("sandboxd_pool_target", "Warm containers the pools aim at now: min, more while creates drain them, at most max.", nil, nil)
	egressDesc   = prometheus.NewDesc("sandboxd_egress_denials_total", "Connections the sessions' egress proxies refused (allow_hosts), by way: http and connect (answered 403), tls (closed), limit (past the session's connection bound).", []string{"via"}, nil)
)

// statsCollector asks the manager at scrape time, so the numbers are never
// stale and nothing has to update gauges on every state change.
type statsCollector struct{ stats func() Stats }

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- poolDesc
	ch <- targetDesc
	ch <- egressDesc
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for state, n := range s.SessionsByState {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.PoolSize))
	ch <- prometheus.MustNewConstMetric(targetDesc, prometheus.GaugeValue, float64(s.PoolTarget))
	for via, n := range s.EgressDenials {
		ch <- prometheus.MustNewConstMetric(egressDesc, prometheus.CounterValue, float64(n), via)
	}
}
