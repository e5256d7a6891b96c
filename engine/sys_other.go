//go:build !linux

package engine

import "math"

// processCPU is not measured here: NaN leaves the metric out.
func processCPU() float64 { return math.NaN() }
