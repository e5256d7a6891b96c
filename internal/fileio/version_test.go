package fileio

import "testing"

func TestVersionChanged(t *testing.T) {
	v := Version{CtimeNs: 100, MtimeNs: 50, Nlink: 2}
	for _, tt := range []struct {
		name         string
		ctime, mtime int64
		nlink        uint64
		want         bool
	}{
		{"untouched", 100, 50, 2, false},
		{"written", 200, 150, 2, true},
		{"written, mtime put back (rsync --inplace -t)", 200, 50, 2, true},
		{"chmod (taken for a change)", 200, 50, 2, true},
		{"replaced by rename, or unlinked", 200, 50, 1, false},
		{"last name gone", 200, 50, 0, false},
		{"linked again", 200, 50, 3, false},
		{"written, then unlinked", 300, 150, 1, true},
	} {
		if got := v.changedFrom(tt.ctime, tt.mtime, tt.nlink); got != tt.want {
			t.Errorf("%s: changedFrom(%d, %d, %d) = %v, want %v", tt.name, tt.ctime, tt.mtime, tt.nlink, got, tt.want)
		}
	}
}
