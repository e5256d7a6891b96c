//go:build !linux

package engine

import (
	"errors"

	"github.com/mediaship/engine/integrity"
)

type fdReaderAt int

func (fdReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errors.ErrUnsupported }

func fdIdentity(int) (integrity.FileID, error) { return integrity.FileID{}, errors.ErrUnsupported }
