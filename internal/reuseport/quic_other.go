//go:build !linux

package reuseport

import (
	"net/netip"
	"os"
)

type quicObjects struct{}

func (quicObjects) close() error                          { return nil }
func (quicObjects) add(uint8, int) error                  { return errNotLinux }
func (quicObjects) setCurrent(uint8) error                { return errNotLinux }
func (quicObjects) current() (uint8, error)               { return 0, errNotLinux }
func (quicObjects) remove(uint8)                          {}
func (quicObjects) files() ([]*os.File, error)            { return nil, errNotLinux }
func listenUDP(string, bool) (int, string, error)         { return -1, "", errNotLinux }
func steerQUIC(int, uint8) (*QUICSteering, error)         { return nil, errNotLinux }
func adoptQUIC([]*os.File) (*QUICSteering, error)         { return nil, errNotLinux }
func (quicObjects) holdRelay(netip.AddrPort, uint8) error { return errNotLinux }
func (quicObjects) dropRelay(netip.AddrPort)              {}
