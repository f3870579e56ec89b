#!/usr/bin/env bash
# Makes a throwaway PKI for the mutual-TLS tests in DIR with the openssl CLI (P-256 keys, valid
# one day): ca.pem/ca.key, server.pem/server.key (SAN 127.0.0.1, localhost, mxserve-worker),
# client.pem/client.key (clientAuth), and rogue-ca.pem plus rogue-client.pem/.key signed by a
# CA the servers do not trust. Not for production: use cert-manager or your own CA there.
set -euo pipefail
dir=${1:?usage: make_test_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # name
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 1 -subj "/CN=$1" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() {  # name ca extensions...
  local name=$1 ca=$2 ext=$3
  key "$name.key"
  openssl req -new -key "$name.key" -out "$name.csr" -subj "/CN=$name"
  printf '%b' "$ext" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
    -out "$name.pem" -days 1 -extfile "$name.ext" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}
ca ca
ca rogue-ca
leaf server ca "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:mxserve-worker\n"
leaf client ca "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
# One certificate for both ends (local workers present the coordinator's own certificate).
leaf both ca "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
leaf rogue-client rogue-ca "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
