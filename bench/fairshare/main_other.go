//go:build !linux

// Command fairshare is Linux-only, as the peers it runs and the loopback
// addresses it attacks from (main_linux.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "fairshare: Linux only")
	os.Exit(2)
}
