//go:build !linux

package engine

import (
	"errors"
	"net"

	"github.com/mediaship/engine/integrity"
)

func fdIdentity(int) (integrity.FileID, error) { return integrity.FileID{}, errors.ErrUnsupported }

func enableGRO(*net.UDPConn) bool { return false }
func groSegment([]byte) int       { return 0 }
func gsoControl(int) []byte       { return nil }
