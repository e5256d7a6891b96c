//go:build !linux

package vmtest

import (
	"os"
	"testing"
)

func isGuest() bool { return false }

func guestMain(m *testing.M) { os.Exit(m.Run()) }

func hostHasKTLS() bool { return false }
