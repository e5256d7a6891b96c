//go:build !linux

package digests

import (
	"errors"

	"github.com/mediaship/engine/integrity"
)

func fdIdentity(int) (integrity.FileID, error) { return integrity.FileID{}, errors.ErrUnsupported }
