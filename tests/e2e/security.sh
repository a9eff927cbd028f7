#!/usr/bin/env bash
# End-to-end test of the daemon's security settings (docs/operations.md, "Security"),
# with openssl-made certificates, curl and openssl s_client:
#   - web.tls_client_ca_file: a client certificate the CA signed is accepted; none, or one
#     from another CA, fails the handshake;
#   - SIGHUP reloads the certificate: a new connection sees the new one while a keep-alive
#     connection opened before goes on answering; a broken certificate file keeps the
#     previous certificate and logs an error;
#   - web.write_* / web.read_* credentials: each route takes its own and refuses the
#     other's; the shared web.bearer_token_file serves a route without its own;
#   - at log.level=debug no secret (tokens, password, the wrong ones tried) reaches the log.
#
# Environment: PT_BUILD_DIR (build tree with promtable; default ../../build).
set -u -o pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
pt_require curl openssl timeout
pt_programs PROMTABLE=promtable
pt_mktemp T security

# ---------------------------------------------------------------------------- certificates
# mkcert NAME CA_NAME SUBJECT : a key and a certificate NAME.pem signed by CA_NAME (or
# self-signed when CA_NAME is "-"), valid for localhost and 127.0.0.1.
mkcert() {
    local name=$1 ca=$2 subj=$3
    openssl req -new -newkey rsa:2048 -nodes -keyout "$T/$name.key" -out "$T/$name.csr" \
        -subj "$subj" >/dev/null 2>&1 || return 1
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$T/$name.ext"
    if [ "$ca" = - ]; then
        printf 'basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign,cRLSign\n' >"$T/$name.ext"
        openssl x509 -req -in "$T/$name.csr" -signkey "$T/$name.key" -days 2 \
            -extfile "$T/$name.ext" -out "$T/$name.pem" >/dev/null 2>&1
    else
        openssl x509 -req -in "$T/$name.csr" -CA "$T/$ca.pem" -CAkey "$T/$ca.key" \
            -CAcreateserial -days 2 -extfile "$T/$name.ext" -out "$T/$name.pem" >/dev/null 2>&1
    fi
}
{ mkcert ca - /CN=promtable-test-ca && mkcert otherca - /CN=other-ca &&
  mkcert server1 ca /CN=localhost && mkcert server2 ca /CN=localhost &&
  mkcert client ca /CN=prometheus && mkcert rogue otherca /CN=rogue; } ||
    tap_bail "openssl cannot make the certificates"
cp "$T/server1.pem" "$T/cert.pem"
cp "$T/server1.key" "$T/key.pem"
fingerprint() { openssl x509 -noout -fingerprint -sha256 -in "$1" | cut -d= -f2; }
FP1=$(fingerprint "$T/server1.pem")
FP2=$(fingerprint "$T/server2.pem")

WRITE_TOKEN=write-token-$RANDOM$RANDOM
READ_TOKEN=read-token-$RANDOM$RANDOM
WRONG_TOKEN=wrong-token-$RANDOM$RANDOM
printf '%s\n' "$WRITE_TOKEN" >"$T/write.token"
printf '%s\n' "$READ_TOKEN" >"$T/read.token"

# ------------------------------------------------------------------------------- the daemon
PORT=''
pt_free_port PORT
pt_spawn "$T/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.backend=embedded --storage.embedded.path="$T/data" --log.level=debug \
    --web.tls-cert-file="$T/cert.pem" --web.tls-key-file="$T/key.pem" \
    --web.tls-client-ca-file="$T/ca.pem" \
    --web.write-bearer-token-file="$T/write.token" --web.read-bearer-token-file="$T/read.token"
PID=$PT_PID
U=https://localhost:$PORT
CURL=(curl -sS --max-time 10 --cacert "$T/ca.pem" --resolve "localhost:$PORT:127.0.0.1")
MINE=(--cert "$T/client.pem" --key "$T/client.key")
if pt_wait_http "$U/-/ready" 20 "$PID" --cacert "$T/ca.pem" "${MINE[@]}" \
        --resolve "localhost:$PORT:127.0.0.1"; then
    tap_ok "promtable serves TLS with a client CA"
else
    tap_not_ok "promtable serves TLS with a client CA"
    tap_diag_file "$T/promtable.log"
    tap_bail "promtable did not start"
fi

# ----------------------------------------------------------------------- client certificates
code() { "${CURL[@]}" -o /dev/null -w '%{http_code}' "$@" 2>/dev/null; }
tap_is "$(code "${MINE[@]}" "$U/-/healthy")" 200 "a client certificate the CA signed is accepted"
tap_is "$(code "$U/-/healthy")" 000 "a client without a certificate fails the handshake"
tap_is "$(code --cert "$T/rogue.pem" --key "$T/rogue.key" "$U/-/healthy")" 000 \
    "a client certificate from another CA fails the handshake"
tap_is "$(code "${MINE[@]}" "$U/-/healthy")" 200 "the server still answers after refusals"

# ---------------------------------------------------------------------- write/read credentials
W=(-H 'Content-Encoding: snappy' -H 'Content-Type: application/x-protobuf'
   -H 'X-Prometheus-Remote-Write-Version: 0.1.0' --data-binary @"$PT_ROOT/tests/data/prom-2.42-write.bin")
R=(-H 'Content-Encoding: snappy' -H 'Content-Type: application/x-protobuf'
   -H 'X-Prometheus-Remote-Read-Version: 0.1.0' --data-binary @"$PT_ROOT/tests/data/prom-2.42-read.bin")
auth() { printf 'Authorization: Bearer %s' "$1"; }
tap_is "$(code "${MINE[@]}" -H "$(auth "$WRITE_TOKEN")" "${W[@]}" "$U/api/v1/write")" 204 \
    "write with the write token: 204"
tap_is "$(code "${MINE[@]}" -H "$(auth "$READ_TOKEN")" "${W[@]}" "$U/api/v1/write")" 401 \
    "write with the read token: 401"
tap_is "$(code "${MINE[@]}" -H "$(auth "$WRONG_TOKEN")" "${W[@]}" "$U/api/v1/write")" 401 \
    "write with a wrong token: 401"
tap_is "$(code "${MINE[@]}" "${W[@]}" "$U/api/v1/write")" 401 "write without credentials: 401"
tap_is "$(code "${MINE[@]}" -H "$(auth "$READ_TOKEN")" "${R[@]}" "$U/api/v1/read")" 200 \
    "read with the read token: 200"
tap_is "$(code "${MINE[@]}" -H "$(auth "$WRITE_TOKEN")" "${R[@]}" "$U/api/v1/read")" 401 \
    "read with the write token: 401"
tap_is "$(code "${MINE[@]}" "$U/metrics")" 200 "/metrics needs no credentials"

# ------------------------------------------------------------------------- SIGHUP reload
served_fp() {
    openssl s_client -connect "127.0.0.1:$PORT" -servername localhost \
        -cert "$T/client.pem" -key "$T/client.key" </dev/null 2>/dev/null |
        openssl x509 -noout -fingerprint -sha256 2>/dev/null | cut -d= -f2
}
# wait_for COUNT PATTERN FILE : up to 20 s for COUNT lines matching PATTERN in FILE.
wait_for() {
    local i
    for i in $(seq 200); do
        [ "$(grep -c -- "$2" "$3" 2>/dev/null)" -ge "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
tap_is "$(served_fp)" "$FP1" "before SIGHUP a new connection gets the first certificate"

# A keep-alive connection held open across the reload: requests go in through a FIFO.
mkfifo "$T/ka.in"
openssl s_client -quiet -ign_eof -connect "127.0.0.1:$PORT" -servername localhost \
    -cert "$T/client.pem" -key "$T/client.key" <"$T/ka.in" >"$T/ka.out" 2>"$T/ka.err" &
KA_PID=$!
pt_on_exit "kill $KA_PID 2>/dev/null"
exec 7>"$T/ka.in"
REQ=$'GET /-/healthy HTTP/1.1\r\nHost: localhost\r\n\r\n'
printf '%s' "$REQ" >&7
tap_check "the keep-alive connection answers before the reload" \
    wait_for 1 '^HTTP/1.1 200' "$T/ka.out"

cp "$T/server2.pem" "$T/cert.pem"
cp "$T/server2.key" "$T/key.pem"
kill -HUP "$PID"
tap_check "SIGHUP: the reload is logged" wait_for 1 'msg="TLS certificate reloaded"' "$T/promtable.log"
tap_is "$(served_fp)" "$FP2" "after SIGHUP a new connection gets the new certificate"
printf '%s' "$REQ" >&7
tap_check "the keep-alive connection opened before the reload still answers" \
    wait_for 2 '^HTTP/1.1 200' "$T/ka.out"

echo "not a certificate" >"$T/cert.pem"
kill -HUP "$PID"
tap_check "SIGHUP with a broken certificate file: an error is logged" \
    wait_for 1 'msg="TLS reload failed, keeping the previous certificate"' "$T/promtable.log"
tap_is "$(served_fp)" "$FP2" "a broken certificate file keeps the previous certificate"
printf '%s' "$REQ" >&7
tap_check "the keep-alive connection still answers after the failed reload" \
    wait_for 3 '^HTTP/1.1 200' "$T/ka.out"
exec 7>&-
tap_check "promtable is still running" pt_alive "$PID"

# --------------------------------------------------------------------- no secret in the log
pt_stop "$PID" 10
tap_is "$?" 0 "promtable stops cleanly"
# The embedded store logs its flushes at debug level: proof that the level was on.
tap_check "promtable logged at debug level" grep -q 'level=debug' "$T/promtable.log"
leaks=''
for s in "$WRITE_TOKEN" "$READ_TOKEN" "$WRONG_TOKEN"; do
    grep -qF -- "$s" "$T/promtable.log" && leaks="$leaks $s"
done
tap_is "$leaks" "" "no token (right or wrong) appears in the debug log"

# ---------------------------------------------------------- shared credentials and basic auth
printf 'shared-%s\n' "$RANDOM$RANDOM" >"$T/shared.token"
SHARED=$(cat "$T/shared.token")
PASSWORD=pw-$RANDOM$RANDOM
printf '%s\n' "$PASSWORD" >"$T/read.password"
PORT2=''
pt_free_port PORT2
pt_spawn "$T/promtable2.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT2" \
    --storage.backend=embedded --storage.embedded.path="$T/data2" --log.level=debug \
    --web.bearer-token-file="$T/shared.token" --web.read-basic-auth-username=grafana \
    --web.read-basic-auth-password-file="$T/read.password"
PID2=$PT_PID
P=http://127.0.0.1:$PORT2
pt_wait_http "$P/-/ready" 20 "$PID2" || tap_diag_file "$T/promtable2.log"
pcode() { curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "$@" 2>/dev/null; }
tap_is "$(pcode -H "$(auth "$SHARED")" "${W[@]}" "$P/api/v1/write")" 204 \
    "a route without its own credentials takes the shared token"
tap_is "$(pcode -u "grafana:$PASSWORD" "${R[@]}" "$P/api/v1/read")" 200 \
    "read takes its own basic auth"
tap_is "$(pcode -H "$(auth "$SHARED")" "${R[@]}" "$P/api/v1/read")" 401 \
    "read's own credentials replace the shared token"
tap_is "$(pcode -u "grafana:wrong-$PASSWORD" "${R[@]}" "$P/api/v1/read")" 401 \
    "read with a wrong password: 401"
pt_stop "$PID2" 10
leaks=''
for s in "$SHARED" "$PASSWORD"; do
    grep -qF -- "$s" "$T/promtable2.log" && leaks="$leaks $s"
done
tap_is "$leaks" "" "neither the shared token nor the password appears in the debug log"

tap_done
