module github.com/mediaship/engine

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/pelletier/go-toml/v2 v2.4.3
	github.com/quic-go/qpack v0.6.0
	github.com/quic-go/quic-go v0.65.0
	github.com/zeebo/blake3 v0.2.4
	golang.org/x/crypto v0.59.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/klauspost/cpuid/v2 v2.0.12 // indirect
	golang.org/x/text v0.44.0 // indirect
)
