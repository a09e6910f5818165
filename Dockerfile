# The integration service on the official Deno image, pinned.
# Build: docker build -t integration-service .
# Run:   docker run -p 8000:8000 -v integration-data:/app/data integration-service
FROM denoland/deno:2.9.6

WORKDIR /app

# Dependencies first, in their own layer: rebuilt only when they change.
COPY deno.json deno.lock ./
COPY lib/ lib/
COPY main.ts admin.ts openapi.json ./
RUN deno cache main.ts admin.ts lib/postgres_store.ts

# The store lives on a volume owned by the non-root deno user; ./data is the
# only folder the start task may read or write.
RUN mkdir -p /app/data && chown deno:deno /app/data
VOLUME /app/data
USER deno

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
  CMD ["deno", "eval", "const r = await fetch('http://127.0.0.1:8000/api/v1/health/live'); Deno.exit(r.ok ? 0 : 1)"]

# Exactly the start task's permissions (tests/deploy_test.ts keeps them in step).
CMD ["deno", "run", "-q", "--env-file", "--allow-net=0.0.0.0,127.0.0.1,[::]", "--allow-read=./data", "--allow-write=./data", "--allow-env=PORT,HOST,DENO_KV_PATH,TRUST_PROXY_HOPS,LOCKOUT_MAX_FAILURES,LOCKOUT_WINDOW_SECONDS,LOCKOUT_SECONDS,TLS_CERT_FILE,TLS_KEY_FILE,DATABASE_URL,PGAPPNAME", "main.ts"]
