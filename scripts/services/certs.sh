# A throwaway certificate authority and a server certificate for 127.0.0.1 and localhost, for
# the TLS listeners of the test servers. Sourced by the per-service scripts after common.sh.
#
# ensure_test_certs writes, once, into $SERVICES_DIR/certs:
#   ca.pem, ca.key           the authority that signs the server certificate
#   server.pem, server.key   the server certificate (SAN IP:127.0.0.1, DNS:localhost)
#   client.pem, client.key   a client certificate (CN leasehold-test-client), for servers
#                            that demand one
#   other-ca.pem             an unrelated authority, for tests that expect a refusal
# and sets TEST_CERTS_DIR to that folder. Later calls reuse the files.

ensure_test_certs() {
  TEST_CERTS_DIR="$SERVICES_DIR/certs"
  local dir=$TEST_CERTS_DIR
  if [ -f "$dir/ca.pem" ] && [ -f "$dir/server.pem" ] && [ -f "$dir/server.key" ] \
    && [ -f "$dir/other-ca.pem" ] && [ -f "$dir/client.pem" ] && [ -f "$dir/client.key" ]; then
    return 0
  fi
  command -v openssl >/dev/null || apt_install openssl
  rm -rf "$dir"
  mkdir -p "$dir"
  chmod 700 "$dir"
  local days=3650 quiet=(-batch)
  openssl req "${quiet[@]}" -x509 -newkey rsa:2048 -nodes -days $days \
    -subj "/CN=leasehold test CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req "${quiet[@]}" -x509 -newkey rsa:2048 -nodes -days $days \
    -subj "/CN=leasehold unrelated CA" -keyout "$dir/other-ca.key" -out "$dir/other-ca.pem" \
    2>/dev/null
  openssl req "${quiet[@]}" -new -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf '%s\n' \
    "basicConstraints=CA:FALSE" \
    "keyUsage=digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days $days -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null
  openssl req "${quiet[@]}" -new -newkey rsa:2048 -nodes -subj "/CN=leasehold-test-client" \
    -keyout "$dir/client.key" -out "$dir/client.csr" 2>/dev/null
  printf '%s\n' \
    "basicConstraints=CA:FALSE" \
    "keyUsage=digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth" >"$dir/client.ext"
  openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days $days -extfile "$dir/client.ext" -out "$dir/client.pem" 2>/dev/null
  rm -f "$dir/server.csr" "$dir/server.ext" "$dir/client.csr" "$dir/client.ext" "$dir/ca.srl"
  # The certificates are public; the keys stay readable by root only.
  chmod 644 "$dir"/*.pem
  chmod 600 "$dir"/*.key
  chmod 755 "$dir"
}
