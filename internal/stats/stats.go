// Package stats has the summaries the benchmark tools report: median,
// minimum and maximum of repeated measurements.
package stats

import "slices"

// Median is the middle value of v (the mean of the two middle ones for
// an even count); 0 for none. v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Min is the smallest value of v; 0 for none.
func Min(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Min(v)
}

// Max is the largest value of v; 0 for none.
func Max(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Max(v)
}
