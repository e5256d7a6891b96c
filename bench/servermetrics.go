package bench

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ServerMetrics is what an engine's /metrics says happened over the
// samples: each figure is the difference between a reading at the start
// and one at the end.
type ServerMetrics struct {
	URL   string `json:"url"`
	Error string `json:"error,omitempty"` // a reading failed: no figures
	// SocketErrors is engine_socket_errors_total by kind (timeout,
	// aborted, write_error, accept_error, rejected).
	SocketErrors map[string]int64 `json:"socket_errors"`
	// BytesByTransport is engine_response_bytes_total by transport
	// (plain_sendfile, userspace_tls, kernel_tls_sendfile, quic).
	BytesByTransport map[string]int64 `json:"bytes_by_transport"`
	// Handshakes is engine_tls_handshakes_total by result.
	Handshakes        map[string]int64 `json:"tls_handshakes"`
	Promotions        int64            `json:"ktls_promotions"`
	PromotionFailures int64            `json:"ktls_promotion_failures"`
	AccessLogDropped  int64            `json:"access_log_dropped_lines"`
}

// metricValues maps a series ("name" or "name{label=value}", one label
// at most is kept) to its value.
type metricValues map[string]float64

// The families read, and the label that splits each.
var readFamilies = map[string]string{
	"engine_socket_errors_total":            "kind",
	"engine_response_bytes_total":           "transport",
	"engine_tls_handshakes_total":           "result",
	"engine_ktls_promotions_total":          "",
	"engine_ktls_promotion_failures_total":  "",
	"engine_access_log_dropped_lines_total": "",
}

// readMetrics reads admin's /metrics with Prometheus's text parser.
func readMetrics(admin string) (metricValues, error) {
	u := strings.TrimSuffix(admin, "/") + "/metrics"
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	v := metricValues{}
	for name, label := range readFamilies {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.Metric {
			key := name
			for _, l := range m.Label {
				if l.GetName() == label && label != "" {
					key = name + "{" + l.GetValue() + "}"
				}
			}
			var x float64
			switch {
			case m.Counter != nil:
				x = m.Counter.GetValue()
			case m.Gauge != nil:
				x = m.Gauge.GetValue()
			case m.Untyped != nil: // no # TYPE line
				x = m.Untyped.GetValue()
			}
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > 1<<62 {
				return nil, fmt.Errorf("%s: %s is %v, not a count", u, key, x)
			}
			v[key] += x
		}
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("%s has no engine_ metrics: not an engine's admin listener?", u)
	}
	return v, nil
}

// metricsDelta reads admin again and returns the differences from first.
func metricsDelta(admin string, first metricValues, err error) *ServerMetrics {
	m := &ServerMetrics{URL: admin}
	var last metricValues
	if err == nil {
		last, err = readMetrics(admin)
	}
	if err != nil {
		m.Error = err.Error()
		return m
	}
	for k, x := range first {
		if last[k] < x {
			m.Error = fmt.Sprintf("%s went from %v to %v: the counters were reset (the server restarted?) and the differences mean nothing", k, x, last[k])
			return m
		}
	}
	split := func(name string) map[string]int64 {
		out := map[string]int64{}
		for k, v := range last {
			if label, ok := strings.CutPrefix(k, name+"{"); ok {
				out[strings.TrimSuffix(label, "}")] = int64(v - first[k])
			}
		}
		return out
	}
	m.SocketErrors = split("engine_socket_errors_total")
	m.BytesByTransport = split("engine_response_bytes_total")
	m.Handshakes = split("engine_tls_handshakes_total")
	d := func(name string) int64 { return int64(last[name] - first[name]) }
	m.Promotions = d("engine_ktls_promotions_total")
	m.PromotionFailures = d("engine_ktls_promotion_failures_total")
	m.AccessLogDropped = d("engine_access_log_dropped_lines_total")
	return m
}

// write prints the figures in one block of the text report.
func (m *ServerMetrics) write(w io.Writer) {
	if m.Error != "" {
		fmt.Fprintf(w, "server metrics: not read (%s)\n", m.Error)
		return
	}
	kinds := func(v map[string]int64, unit func(int64) string) string {
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", k, unit(v[k]))
		}
		if b.Len() == 0 {
			return "none"
		}
		return b.String()
	}
	count := func(n int64) string { return fmt.Sprint(n) }
	fmt.Fprintf(w, "server metrics (%s, over the samples):\n", m.URL)
	fmt.Fprintf(w, "  socket errors: %s\n", kinds(m.SocketErrors, count))
	fmt.Fprintf(w, "  bytes:         %s\n", kinds(m.BytesByTransport, mib))
	fmt.Fprintf(w, "  handshakes:    %s; kernel TLS promotions %d (failed %d); access log lines dropped %d\n",
		kinds(m.Handshakes, count), m.Promotions, m.PromotionFailures, m.AccessLogDropped)
}
