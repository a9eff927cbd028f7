# promtable on Debian 12, built from this repository with Debian's packages only.
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config libhttp-parser-dev librocksdb-dev libnghttp2-dev \
        libsnappy-dev libprotobuf-c-dev protobuf-c-compiler libpcre2-dev libyaml-dev libssl-dev \
        libxxhash-dev libgrpc-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY base base
COPY adapter adapter
COPY backends backends
COPY prompb prompb
COPY tests tests
COPY bench bench
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$(nproc)" --target promtable

FROM debian:12
RUN apt-get update && apt-get install -y --no-install-recommends \
        libhttp-parser2.9 librocksdb7.8 libnghttp2-14 libsnappy1v5 libprotobuf-c1 libpcre2-8-0 \
        libyaml-0-2 libssl3 libxxhash0 libgrpc29 ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
# Runs as an unprivileged system user (uid/gid 65532), which owns the data directory: a
# named volume on /data starts with that ownership; a bind-mounted host directory must be
# writable by uid 65532 (chown 65532:65532 DIR), or run with --user.
RUN groupadd --system --gid 65532 promtable \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin promtable \
    && mkdir /data && chown promtable:promtable /data
COPY --from=build /src/build/promtable /usr/local/bin/promtable
COPY configs /etc/promtable
EXPOSE 9201
VOLUME /data
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/promtable"]
CMD ["--config.file=/etc/promtable/promtable.yml", "--storage.embedded.path=/data"]
