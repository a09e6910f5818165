#!/usr/bin/env bash
# A throwaway PostgreSQL for tests and CI, from the machine's PostgreSQL 15.
#
#   scripts/postgres_test_server.sh start DIR PORT   # prints the DATABASE_URL
#   scripts/postgres_test_server.sh stop DIR
#
# It listens on 127.0.0.1:PORT only and trusts every loopback connection, so
# it is for tests alone. Durability is traded for speed (no fsync): a crash
# may lose the data, which tests recreate anyway. Starting a running server,
# stopping a stopped one, or starting again after a stop all just work, so
# a test can stop and restart the database under a running service.
set -euo pipefail

DATABASE=keys
SUPERUSER=postgres

usage() {
  echo "usage: $0 start DIR PORT | stop DIR" >&2
  exit 2
}

die() {
  echo "$0: $*" >&2
  exit 1
}

# runuser lives in sbin, which a CI job's PATH may leave out.
PATH=$PATH:/usr/sbin:/sbin

# PostgreSQL refuses to run as root: as root, run its tools as the postgres
# user, who must then own DIR.
as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# Debian's packages keep the server tools off PATH, under a versioned folder.
if ! command -v initdb >/dev/null; then
  for bin in /usr/lib/postgresql/*/bin; do
    [[ -x $bin/initdb ]] && PATH=$bin:$PATH
  done
fi

for tool in initdb pg_ctl postgres psql; do
  command -v "$tool" >/dev/null ||
    die "$tool is not on PATH; install PostgreSQL 15 (apt-get install postgresql-15) and put its bin folder on PATH"
done

start() {
  local dir=$1 port=$2
  [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) ||
    die "PORT must be a whole number from 1 to 65535, not \"$port\""
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local data=$dir/data
  if [[ $(id -u) -eq 0 ]]; then
    chown postgres: "$dir"
    chmod 700 "$dir"
    as_owner test -x "$dir" ||
      die "the postgres user cannot enter $dir; make its parent folders readable (chmod o+x)"
  fi
  if [[ ! -f $data/PG_VERSION ]]; then
    as_owner initdb --pgdata="$data" --username="$SUPERUSER" \
      --auth-local=trust --auth-host=trust --encoding=UTF8 --locale=C.UTF-8 \
      --no-sync >"$dir/initdb.log" 2>&1 ||
      die "initdb failed; see $dir/initdb.log"
  fi
  if ! as_owner pg_ctl status --pgdata="$data" >/dev/null 2>&1; then
    # Options on the command line rather than in postgresql.conf, so that a
    # restart on another port needs no edit.
    as_owner pg_ctl start --pgdata="$data" --log="$dir/server.log" --wait \
      --timeout=30 --silent -o "-c listen_addresses=127.0.0.1 -c port=$port \
        -c unix_socket_directories='$dir' -c max_connections=300 \
        -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      >/dev/null ||
      die "PostgreSQL did not start; see $dir/server.log"
  fi
  local psql=(psql --no-psqlrc --quiet --tuples-only --no-align
    --host=127.0.0.1 --port="$port" --username="$SUPERUSER" --dbname=postgres)
  if [[ $("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'") != 1 ]]; then
    "${psql[@]}" -c "CREATE DATABASE $DATABASE" >/dev/null
  fi
  echo "postgres://$SUPERUSER@127.0.0.1:$port/$DATABASE"
}

stop() {
  local data=$1/data
  [[ -f $data/PG_VERSION ]] || return 0
  if as_owner pg_ctl status --pgdata="$data" >/dev/null 2>&1; then
    as_owner pg_ctl stop --pgdata="$data" --mode=fast --wait --silent
  fi
}

case "${1:-}:$#" in
start:3) start "$2" "$3" ;;
stop:2) stop "$2" ;;
*) usage ;;
esac
