package preflight

import "os"

// isVM reports whether this test binary runs as /init in the test VM.
func isVM() bool { return os.Getpid() == 1 }
