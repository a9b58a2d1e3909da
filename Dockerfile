# gantry's container image: the `gantry` binary on a distroless base, running as a
# non-root user (65532) with nothing else in the image (no shell, no package manager), so
# the Deployment can run it with a read-only root filesystem.
#
#   docker build -t gantry:dev .
#
# The node agent (`gantry agent`) loads NVML (libnvidia-ml.so.1) at run time: the NVIDIA
# container toolkit mounts it into GPU pods; the image does not carry it.

FROM rust:1.95-bookworm AS build
# `.git` is not copied: pass the commit for `gantry --version`
# (docker build --build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD) .).
ARG GIT_COMMIT=unknown
ENV GANTRY_GIT_COMMIT=$GIT_COMMIT
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p gantry \
 && install -D -m 0755 target/release/gantry /out/gantry

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/gantry /usr/local/bin/gantry
# The bundled policies, so `gantry serve` starts on defaults; mount your own over it.
COPY --from=build /src/policies /usr/share/gantry/policies
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/gantry"]
CMD ["serve", "--policy", "/usr/share/gantry/policies/onprem-dgx", "--listen", "0.0.0.0:8443", "--insecure-http"]
