# The integration service on Deno's official image, pinned to the Deno version
# the project is developed and tested with.
#
#   docker build -t integration-service .
#   docker run -d --name integration -p 8000:8000 -v integration-data:/data integration-service
#   docker exec -i integration deno task -q keys create --name berlin-erp --email ops@example.com
#
FROM denoland/deno:2.9.6

# No background check for a newer Deno from a container that cannot act on it.
ENV DENO_NO_UPDATE_CHECK=1

WORKDIR /app

# The store lives on the /data volume, owned by the non-root deno user and
# private to it (0700; the service also makes its files 0600). The start
# task derives its permissions from DENO_KV_PATH, so /data is all it may write.
RUN mkdir -m 0700 /data && chown deno:deno /data
ENV DENO_KV_PATH=/data/keys.db

USER deno

# Dependencies in their own layer, before anything that changes more often
# (health check, command), resolved from the lockfile exactly (--frozen). The
# code is copied owned by root, so the service cannot rewrite itself; tests,
# docs and the store stay out (.dockerignore).
COPY deno.json deno.lock ./
COPY main.ts admin.ts openapi.json ./
COPY lib/ lib/
COPY scripts/permissions.ts scripts/keys.ts scripts/
RUN deno install --frozen --entrypoint main.ts admin.ts scripts/permissions.ts scripts/keys.ts

VOLUME /data
EXPOSE 8000

# No curl in the image: Deno fetches the liveness route itself.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["deno", "eval", "const port = Deno.env.get('PORT') || '8000'; const res = await fetch('http://127.0.0.1:' + port + '/api/v1/health/live', { signal: AbortSignal.timeout(4000) }); await res.body?.cancel(); Deno.exit(res.ok ? 0 : 1);"]

# The start task itself, so its flags are written once, in deno.json. The
# base image's entrypoint (tini) passes SIGTERM to deno task, which passes it
# to the server, so `docker stop` lets in-flight requests finish.
CMD ["deno", "task", "-q", "start"]
