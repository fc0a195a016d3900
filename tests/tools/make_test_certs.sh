#!/usr/bin/env bash
# Certificates for the TLS tests, made with the `openssl` command into DIR:
#   ca.pem/ca.key          a self-signed CA
#   server.pem/server.key  signed by it, for IP 127.0.0.1 only (so "localhost" must not verify)
#   client.pem/client.key  signed by it (CN kd-test-client), for a server with --tls-ca
#   other-ca.pem           another self-signed CA, which signed nothing of the server's
#   stranger.pem/.key      a client certificate signed by other-ca
# EC P-256 keys: quick to make. Usage: make_test_certs.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # NAME CN
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 2 -out "$1.pem" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
sign() { # NAME CN CA EXT
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
ca ca kd-test-ca
ca other-ca kd-other-ca
sign server kd-test-server ca "subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth"
sign client kd-test-client ca "extendedKeyUsage=clientAuth"
sign stranger kd-stranger other-ca "extendedKeyUsage=clientAuth"
