package transport_test

import (
	"testing"

	"github.com/mediaship/engine/internal/vmtest"
)

// TestKernelTLSTransport runs TestBodiesAndProducer's exchange on a kernel
// with kernel TLS (in the VM when this one has none): the first response
// passes promote_after, so the rest of it (a file by sendfile, a generated
// body by copy, memory by reference) and the producer's frames go out
// under the kernel's key, and the client checks every byte.
func TestKernelTLSTransport(t *testing.T) {
	if !vmtest.OnKTLSKernel(t, vmtest.Options{}) {
		return
	}
	_, want, st := exchange(t, true, true)
	if st.Promotions.Load() != 1 || st.PromoteFailures.Load() != 0 {
		t.Fatalf("promotions %d, failures %d; want 1 and 0", st.Promotions.Load(), st.PromoteFailures.Load())
	}
	if st.KernelBytes.Load() == 0 || st.UserBytes.Load()+st.KernelBytes.Load() != int64(len(want)) {
		t.Fatalf("user %d + kernel %d bytes, want %d with some in the kernel", st.UserBytes.Load(), st.KernelBytes.Load(), len(want))
	}
	t.Logf("promotions 1, kernel bytes %d, userspace bytes %d", st.KernelBytes.Load(), st.UserBytes.Load())
}
