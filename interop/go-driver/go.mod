module nats-pcgroups/interop/go-driver

go 1.25.0

require (
	github.com/nats-io/nats.go v1.52.0
	github.com/synadia-io/orbit.go/pcgroups v0.2.2
)

require (
	github.com/klauspost/compress v1.19.1 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
