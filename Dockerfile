# syntax=docker/dockerfile:1
# One image for every herald process: the compose file (deploy/) runs it as
# migrate, api, relay and worker; with no command it runs the embedded
# `herald serve`.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: this layer stays cached until go.mod or go.sum change.
# The Go client is a module of its own that go.mod replaces with ./client:
# its go.mod is needed to read the module graph.
COPY go.mod go.sum ./
COPY client/go.mod client/
RUN go mod download
COPY . .
# CGO off: the SQLite driver is pure Go, so the binary is static and runs on
# distroless/static. -tags nobench: the shipped binary links no test server
# (herald bench's in-process SMTP sink and receivers); its `herald bench`
# says how to get one that has it (docs/benchmarks.md).
RUN CGO_ENABLED=0 go build -trimpath -tags nobench -ldflags='-s -w' -o /out/herald ./cmd/herald

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/herald /usr/local/bin/herald
# The nonroot user owns its home: the embedded mode's herald.db and
# herald.mbox land there (mount a volume on it to keep them).
WORKDIR /home/nonroot
USER nonroot:nonroot
# Inside a container the loopback default would be unreachable from outside.
ENV HERALD_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/herald"]
CMD ["serve"]
