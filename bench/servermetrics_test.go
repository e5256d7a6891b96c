package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestServerMetricsRefusesNonsense: a server whose counters go backwards
// between the two readings (restarted), or that serves values no counter
// has, gets a "not read" with the reason instead of figures.
func TestServerMetricsRefusesNonsense(t *testing.T) {
	var reads atomic.Int32
	bodies := []string{
		"engine_socket_errors_total{kind=\"timeout\"} 5\nengine_response_bytes_total{transport=\"plain_sendfile\"} 1000\n",
		"engine_socket_errors_total{kind=\"timeout\"} 2\nengine_response_bytes_total{transport=\"plain_sendfile\"} 3000\n",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, bodies[min(int(reads.Add(1))-1, 1)])
	}))
	defer srv.Close()
	first, err := readMetrics(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	m := metricsDelta(srv.URL, first, nil)
	if !strings.Contains(m.Error, "were reset") || m.SocketErrors != nil {
		t.Errorf("counter went backwards: %+v", m)
	}

	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "engine_response_bytes_total{transport=\"quic\"} NaN\n")
	}))
	defer bad.Close()
	if _, err := readMetrics(bad.URL); err == nil || !strings.Contains(err.Error(), "not a count") {
		t.Errorf("NaN counter: %v", err)
	}

	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, bodies[1])
	}))
	defer good.Close()
	m = metricsDelta(good.URL, metricValues{"engine_socket_errors_total{timeout}": 1, "engine_response_bytes_total{plain_sendfile}": 1000}, nil)
	if m.Error != "" || m.SocketErrors["timeout"] != 1 || m.BytesByTransport["plain_sendfile"] != 2000 {
		t.Errorf("differences: %+v", m)
	}
}
