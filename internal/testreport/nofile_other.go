//go:build !unix

package main

import "errors"

func lowerNofile() error { return errors.ErrUnsupported }
