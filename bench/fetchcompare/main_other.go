//go:build !linux

// Command fetchcompare is Linux-only: it reads /proc and drops the page
// cache between downloads (main_linux.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "fetchcompare: Linux only (it reads /proc and drops the page cache)")
	os.Exit(2)
}
