module github.com/mediaship/engine/tools/wtclient

go 1.26.0

require (
	github.com/quic-go/quic-go v0.62.0
	github.com/quic-go/webtransport-go v0.13.0
	github.com/zeebo/blake3 v0.2.4
)

require (
	github.com/dunglas/httpsfv v1.1.1 // indirect
	github.com/klauspost/cpuid/v2 v2.0.12 // indirect
	github.com/quic-go/qpack v0.6.0 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
)
