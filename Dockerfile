# syntax=docker/dockerfile:1
#
# Herald's container image: the worker (workers), the operator CLI (starter)
# and the example subscriber (subscriber), static binaries on a small Alpine
# base, run as an unprivileged user. docker-compose.yml builds it; for a
# registry: docker build -t herald:VERSION .
#
# The image holds no signing key: mount one and set HERALD_SIGNING_KEY.
# No HEALTHCHECK here, because one image runs three different programs; the
# compose file probes each service (busybox wget is in the image for that).

ARG GO_VERSION=1.26
ARG ALPINE_VERSION=3.23

FROM golang:${GO_VERSION} AS build
# Herald is built with go1.27.3 (go.mod's toolchain line): the go command
# fetches it from the module proxy whatever release the base image carries.
ENV GOTOOLCHAIN=go1.27.3
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# The same command as the Makefile's build target (deploy/ tests check it).
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -o bin/ ./workers ./starter ./examples/subscriber

FROM alpine:${ALPINE_VERSION}
# ca-certificates for HTTPS subscriber endpoints, tzdata for local times. /keys
# (private signing keys) and /public-keys (their public halves, for receivers
# that pin keys) belong to the runtime user, so an empty named volume mounted
# there starts with that owner (Docker copies the image directory's ownership
# into a new volume).
RUN apk add --no-cache ca-certificates tzdata \
    && addgroup -S -g 10001 herald \
    && adduser -S -D -H -u 10001 -G herald -h /nonexistent -s /sbin/nologin herald \
    && install -d -o herald -g herald -m 0700 /keys \
    && install -d -o herald -g herald -m 0755 /public-keys
COPY --from=build /src/bin/workers /src/bin/starter /src/bin/subscriber /usr/local/bin/
USER 10001:10001
# The worker's HTTP endpoints (/healthz, /readyz, /metrics, JWKS), its
# publishing API and the example subscriber; they listen on loopback unless
# told otherwise (HERALD_HTTP_ADDR, HERALD_API_ADDR, SUBSCRIBER_ADDR; the API
# is off unless HERALD_API_ADDR is set).
EXPOSE 8088 8089 8090
ENTRYPOINT ["workers"]
