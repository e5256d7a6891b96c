//go:build !linux

// Command cachecompare is Linux-only, as the peers it runs (main_linux.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "cachecompare: Linux only")
	os.Exit(2)
}
