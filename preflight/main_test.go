package preflight

import (
	"testing"

	"github.com/mediaship/engine/internal/vmtest"
)

// Some tests run on a real kernel with kernel TLS, in a VM (vm_linux_test.go).
func TestMain(m *testing.M) { vmtest.Main(m) }
