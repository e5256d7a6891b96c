// Package testnet gives tests network addresses with a known fate. It is
// imported by tests only.
//
// Invariant: an address it returns stays what it says (refusing, here)
// until the test ends, whatever else runs on the machine meanwhile: it
// is held, never closed and hoped free.
package testnet
