package routing

import (
	"strings"
	"testing"

	"github.com/mediaship/engine/engine/config"
)

// TestRoutesRefuseOwnListener: an upstream whose name resolves to the
// server's own listener stops the start, for terminating and relaying
// routes alike; the configuration cannot tell without resolving. The
// name is "localhost", resolved through /etc/hosts as any other name.
func TestRoutesRefuseOwnListener(t *testing.T) {
	for _, pass := range []bool{false, true} {
		cfg := &config.Config{Listen: ":8443"} // every address: whichever of 127.0.0.1 and ::1 "localhost" resolves to first
		cfg.ReverseProxy.Enabled = true
		cfg.ReverseProxy.Routes = []config.Route{
			{Domain: "a", PathPrefix: "/", Upstreams: []string{"127.0.0.1:8444"}, Passthrough: pass},
			{Domain: "b", PathPrefix: "/", Upstreams: []string{"localhost:8443"}, Passthrough: pass},
		}
		_, err := NewRoutes(cfg, pass)
		if err == nil || !strings.Contains(err.Error(), `reverse_proxy.routes[1].upstreams: "localhost:8443" is `) || !strings.Contains(err.Error(), `:8443, this server's own listener`) {
			t.Errorf("passthrough %v: NewRoutes = %v, want the own listener refused", pass, err)
		}
		cfg.Listen = ":8445"
		if _, err := NewRoutes(cfg, pass); err != nil {
			t.Errorf("passthrough %v, another port: NewRoutes = %v", pass, err)
		}
	}
}
