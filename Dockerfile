# vigil's image for builders with internet access: `docker build -t vigil .` at
# the repository root, for the builder's own architecture. Offline, and for
# amd64 and arm64 in one index with SBOMs: release/image.sh, which makes the
# same layout (a static binary at /vigil and the CA certificates, FROM scratch).
#
# Build stage: the static (musl) release binary, with the built-in policies
# compiled from source to wasm32-wasip2 by engine/build.rs and embedded in it.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools \
 && rustup target add wasm32-wasip2 "$(uname -m)-unknown-linux-musl"
WORKDIR /src
COPY . .
RUN target="$(uname -m)-unknown-linux-musl" \
 && cargo build --release --locked -p vigil --target "$target" \
 && install -D -m 0555 "target/$target/release/vigil" /out/vigil

# Runtime: the binary and the CA certificates, nothing else (no shell, no
# package manager, no libc). It runs as UID 65532 unless told otherwise: the
# DaemonSet's init container (`vigil own-state`, as root with CHOWN and
# DAC_READ_SEARCH only) gives the hostPath state directory to that user, and
# the agent drops every capability on a read-only root filesystem.
FROM scratch
COPY --from=build /out/vigil /vigil
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
ENTRYPOINT ["/vigil"]
CMD ["agent"]
