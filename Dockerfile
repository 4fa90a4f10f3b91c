# vigil's image: `docker build -t vigil .` at the repository root.
# Build stage: the release binary, with the built-in policies compiled from
# source to wasm32-wasip2 by engine/build.rs and embedded in it.
FROM rust:1.95-bookworm AS build
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p vigil \
 && install -D target/release/vigil /out/vigil

# Runtime: glibc and nothing else (no shell, no package manager). The agent
# runs as root only to write its hostPath state directory; the DaemonSet drops
# every capability and mounts the root filesystem read-only.
FROM gcr.io/distroless/cc-debian12
COPY --from=build /out/vigil /vigil
ENTRYPOINT ["/vigil"]
CMD ["agent"]
