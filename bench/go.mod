module github.com/sandboxd/sandboxd/bench

go 1.26.0

replace github.com/sandboxd/sandboxd => ../

require (
	github.com/extism/go-sdk v1.7.1
	github.com/google/go-containerregistry v0.22.1
	github.com/sandboxd/sandboxd v0.0.0-00010101000000-000000000000
	github.com/tetratelabs/wazero v1.12.0
)

require (
	github.com/docker/cli v29.7.2+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/dylibso/observe-sdk/go v0.0.0-20240819160327-2d926c5d788a // indirect
	github.com/gobwas/glob v0.2.3 // indirect
	github.com/ianlancetaylor/demangle v0.0.0-20240805132620-81f5be970eca // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/tetratelabs/wabin v0.0.0-20230304001439-f6f874872834 // indirect
	go.opentelemetry.io/proto/otlp v1.3.1 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0
	golang.org/x/text v0.44.0 // indirect
	google.golang.org/protobuf v1.34.2 // indirect
)
