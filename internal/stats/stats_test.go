package stats

import "testing"

func TestSummaries(t *testing.T) {
	for _, tc := range []struct {
		v             []float64
		med, min, max float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		in := append([]float64(nil), tc.v...)
		if got := Median(tc.v); got != tc.med {
			t.Errorf("Median(%v) = %v, want %v", tc.v, got, tc.med)
		}
		if Min(tc.v) != tc.min || Max(tc.v) != tc.max {
			t.Errorf("Min/Max(%v) = %v/%v", tc.v, Min(tc.v), Max(tc.v))
		}
		for i := range in {
			if in[i] != tc.v[i] {
				t.Errorf("Median sorted its input: %v", tc.v)
			}
		}
	}
}
